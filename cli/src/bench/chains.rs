//! Pointer chains written into target memory (with an undo file first),
//! and the chained reads that follow them, each path its own way.

use super::*;

/// Writes 64 chains of 8 pointers into 2 MiB at `at` (each hop on its own
/// page), after saving what was there in a new undo file at `undo`.
pub(super) fn write_chains(device: &DeviceConfig, at: u64, undo: &Path) -> Result<Undo, Failure> {
    let region = (CHAINS * DEPTH * 4096) as u64;
    let mem = Memory::new(LeechCore::open(device)?);
    let mut original = vec![0u8; region as usize];
    if !mem.read_now([(at, &mut original[..])]).is_ok() {
        return Err(Failure(format!(
            "the chain region {at:#x}+{region:#x} is not all readable"
        )));
    }
    let mut chains = original.clone();
    for c in 0..CHAINS {
        for h in 0..DEPTH {
            let here = hop(at, c, h) - at;
            let next = if h + 1 < DEPTH {
                hop(at, c, h + 1)
            } else {
                END ^ c as u64
            };
            chains[here as usize..here as usize + 8].copy_from_slice(&next.to_le_bytes());
        }
    }
    let undo = Undo::save(undo, device, at, original)?;
    let wrote = mem.write_now([(at, &chains[..])]);
    if !wrote.is_ok() {
        // What did land is put back: the region is left as it was found.
        let mut landed = Vec::new();
        wrote.for_each_success(0, chains.len(), |a, b| {
            landed.push((at + a as u64, &undo.bytes()[a..b]))
        });
        let restored = landed.is_empty() || mem.write_now(landed).is_ok();
        if restored {
            undo.discard()?;
        }
        return Err(Failure(format!(
            "cannot write the chains at {at:#x}: is the device writable (file://file=…,write=1)?{}",
            if restored {
                String::new()
            } else {
                format!(
                    " Part of them landed and could not be undone; what was there is saved in {}: \
                     `leechio restore {}` puts it back",
                    undo.path().display(),
                    undo.path().display()
                )
            }
        )));
    }
    // Closing flushes what LeechCore's file device buffers.
    drop(mem);
    errln!(
        "leechio: pointer chains written at {at:#x}; what they replaced is saved in {} \
         until it is put back",
        undo.path().display()
    );
    Ok(undo)
}

/// Address of hop `h` of chain `c`.
pub(super) fn hop(at: u64, c: usize, h: usize) -> u64 {
    at + ((h * CHAINS + c) * 4096 + c * 8) as u64
}

/// What the last hop of chain `c` holds, xor `c`.
pub(super) const END: u64 = 0x1eec_0000_c0ff_ee00;

pub(super) fn chains(
    bench: &mut Bench,
    plugin: &Plugin,
    device: &LeechCore,
    mem: &Memory,
    at: u64,
) -> Result<(), Failure> {
    let workload = "64 pointer chains of depth 8";
    let bytes = (CHAINS * DEPTH * 8) as u64;
    let check = |ends: &[u64]| {
        let ok = ends.iter().enumerate().all(|(c, &e)| e == END ^ c as u64);
        if ok {
            Ok(())
        } else {
            Err(Failure(format!("the chains at {at:#x} do not read back (a live target changed them, or writes did not land)")))
        }
    };
    // Checked within: the limit is measured again after the other rows.
    let mut limit = || {
        let mut cur: Vec<u64> = (0..CHAINS).map(|c| hop(at, c, 0)).collect();
        let mut bufs = vec![[0u8; 8]; CHAINS];
        let t = timed(device, || {
            for _ in 0..DEPTH {
                let mut entries: Vec<ScatterEntry> = cur
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(&a, b)| ScatterEntry::new(a, b))
                    .collect();
                device.read_scatter(&mut entries);
                drop(entries);
                for (p, b) in cur.iter_mut().zip(&bufs) {
                    *p = u64::from_le_bytes(*b);
                }
            }
        });
        check(&cur)?;
        Ok(t)
    };
    bench.row(
        workload,
        "limit: LeechCore scatter, one batch per level",
        bytes,
        &mut limit,
    )?;
    let mut ends = vec![0u64; CHAINS];
    bench.row(workload, "engine: joined async chains", bytes, || {
        let t = timed(device, || {
            let got = mem.block_on(join_all((0..CHAINS).map(|c| async move {
                let mut p = hop(at, c, 0);
                for _ in 0..DEPTH {
                    p = mem.read_val::<u64>(p).await.unwrap_or(0);
                }
                p
            })));
            ends.copy_from_slice(&got);
        });
        Ok(t)
    })?;
    check(&ends)?;
    let mut conn = plugin.conn.clone();
    bench.row(workload, "memflow: read by read", bytes, || {
        Ok(timed(device, || {
            for (c, end) in ends.iter_mut().enumerate() {
                let mut p = hop(at, c, 0);
                for _ in 0..DEPTH {
                    p = conn.phys_view().read::<u64>(Address::from(p)).unwrap_or(0);
                }
                *end = p;
            }
        }))
    })?;
    check(&ends)?;
    bench.row(
        workload,
        "memflow: hand-batched, read_raw_list per level",
        bytes,
        || {
            let mut cur: Vec<u64> = (0..CHAINS).map(|c| hop(at, c, 0)).collect();
            let t = timed(device, || {
                for _ in 0..DEPTH {
                    let mut bufs = vec![[0u8; 8]; CHAINS];
                    let mut list: Vec<ReadData> = cur
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&a, b)| CTup2(Address::from(a), b.as_mut_slice().into()))
                        .collect();
                    let _ = conn.phys_view().read_raw_list(&mut list);
                    drop(list);
                    cur = bufs.iter().map(|b| u64::from_le_bytes(*b)).collect();
                }
            });
            ends.copy_from_slice(&cur);
            Ok(t)
        },
    )?;
    check(&ends)?;
    bench.limit_again(workload, &mut limit)
}
