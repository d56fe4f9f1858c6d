//! Address translation against oracles written elsewhere: page tables built
//! by memflow's `DummyOs` and by the `x86_64` crate, written to an image,
//! read back through LeechCore's file device, and compared with memflow's
//! own translations and process reads.

mod common;

use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use futures::future::join_all;
use leechio::{AddressSpace, DeviceConfig, EngineConfig, LeechCore, Memory, PageError, PageSize};
use memflow::architecture::x86::x64;
use memflow::dummy::{DummyMemory, DummyOs};
use memflow::prelude::v1::*;

const IMAGE_SIZE: usize = 64 << 20;

/// Writes `bytes` to a temporary image and opens it with LeechCore.
fn open_image(bytes: &[u8]) -> (tempfile::TempDir, Memory, Arc<LeechCore>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dummy.raw");
    File::create(&path).unwrap().write_all(bytes).unwrap();
    let device = Arc::new(
        LeechCore::open(&DeviceConfig::new(format!("file://{}", path.display()))).unwrap(),
    );
    let mem = Memory::with_config(device.clone(), EngineConfig::default());
    (dir, mem, device)
}

/// Addresses inside a mapped range, just outside it, anywhere canonical,
/// and non-canonical.
fn addresses(rng: &mut fastrand::Rng, base: u64, size: u64, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| match i % 10 {
            0..=5 => base + rng.u64(0..size),
            6 => base + size + rng.u64(0..0x10_0000),
            7 => base.wrapping_sub(rng.u64(1..0x10_0000)),
            8 => rng.u64(0..0x0000_8000_0000_0000),
            _ => rng.u64(0x0000_8000_0000_0000..0xffff_8000_0000_0000),
        })
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn translations_and_reads_match_memflow_dummy_os() {
    let mut os = DummyOs::with_seed(DummyMemory::new(IMAGE_SIZE), 0x1eec);
    let mut rng = fastrand::Rng::with_seed(11);
    let map_size = 0x30_0000;
    let pids: Vec<Pid> = (0..3)
        .map(|_| {
            let content: Vec<u8> = std::iter::repeat_with(|| rng.u8(..))
                .take(map_size)
                .collect();
            os.alloc_process(map_size, &content)
        })
        .collect();
    let mut image = vec![0u8; IMAGE_SIZE];
    os.phys_view()
        .read_raw_into(Address::null(), &mut image)
        .unwrap();
    let (_dir, mem, device) = open_image(&image);

    let mut checked = (0, 0);
    for pid in pids {
        let info = os.process_info_by_pid(pid).unwrap();
        let (dtb, base) = (info.dtb1.to_umem(), info.address.to_umem());
        let space = AddressSpace::new(mem.clone(), dtb, leechio::Paging::FourLevel);
        let addrs = addresses(&mut rng, base, map_size as u64, 2000);

        let ours = mem.block_on(join_all(addrs.iter().map(|&va| space.translate(va))));
        for (&va, t) in addrs.iter().zip(&ours) {
            if !canonical(va) {
                // DummyOs::vtop refuses these; the architecture's rule is
                // the oracle.
                assert_eq!(
                    t.as_ref().map_err(|e| e.reason),
                    Err(PageError::NonCanonical),
                    "{va:#x}"
                );
                continue;
            }
            let theirs = os.vtop(info.dtb1, va.into()).map(|a| a.to_umem());
            assert_eq!(
                t.as_ref().ok().map(|t| t.pa),
                theirs,
                "translation of {va:#x}"
            );
            if let Ok(t) = t {
                assert_eq!(t.page_size, PageSize::Size4K);
                checked.0 += 1;
            }
        }

        // Reads of 48 bytes, some across the ends of the mapping.
        let mut bufs = vec![[0u8; 48]; addrs.len()];
        let results = mem.block_on(join_all(
            addrs
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&va, buf)| space.read(va, buf)),
        ));
        let mut process = os.process_by_pid(pid).unwrap();
        for ((&va, buf), result) in addrs.iter().zip(&bufs).zip(&results) {
            let mut theirs = [0u8; 48];
            let full = process.read_raw_into(va.into(), &mut theirs).is_ok();
            match result {
                Ok(()) => {
                    assert!(full, "we read {va:#x}, memflow could not");
                    assert_eq!(buf, &theirs, "bytes at {va:#x}");
                    checked.1 += 1;
                }
                Err(e) => {
                    assert!(!full, "memflow read {va:#x}, we could not: {e}");
                    for f in &e.failed {
                        assert!(matches!(
                            f.reason,
                            PageError::NotMapped | PageError::NonCanonical
                        ));
                    }
                    // What we did read agrees with memflow too.
                    let mut ok = [true; 48];
                    for f in &e.failed {
                        ok[f.offset..f.offset + f.len].fill(false);
                    }
                    for i in (0..48).filter(|&i| ok[i]) {
                        assert_eq!(buf[i], theirs[i], "byte {i} at {va:#x}");
                    }
                }
            }
        }
    }
    assert!(
        checked.0 > 3000 && checked.1 > 3000,
        "too few mapped addresses checked: {checked:?}"
    );
    assert!(device.call_count(leechio::Call::ReadScatter) > 0);
}

/// Bits 63..47 all equal.
fn canonical(va: u64) -> bool {
    matches!((va as i64) >> 47, 0 | -1)
}

/// A page-aligned physical memory for the `x86_64` crate's mapper.
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Frame([u8; 4096]);

/// Hands out 4 KiB frames for page tables from a fixed region.
struct FrameBump(u64);

unsafe impl x86_64::structures::paging::FrameAllocator<x86_64::structures::paging::Size4KiB>
    for FrameBump
{
    fn allocate_frame(&mut self) -> Option<x86_64::structures::paging::PhysFrame> {
        let frame = x86_64::structures::paging::PhysFrame::containing_address(
            x86_64::PhysAddr::new(self.0),
        );
        self.0 += 4096;
        Some(frame)
    }
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn large_pages_match_the_x86_64_crate_and_memflow() {
    use x86_64::structures::paging::{
        Mapper, OffsetPageTable, Page, PageTable, PageTableFlags as F, PhysFrame, Size1GiB,
        Size2MiB, Size4KiB, Translate,
    };
    use x86_64::{PhysAddr, VirtAddr};

    let mut frames = vec![Frame([0; 4096]); IMAGE_SIZE / 4096];
    let base = frames.as_mut_ptr() as *mut u8;
    let dtb = 0x300_0000u64;
    let mut bump = FrameBump(dtb + 0x1000);
    // SAFETY: the table and every frame the mapper touches lie in `frames`
    // (the bump allocator stays inside it), reached at offset `base`.
    let mut mapper = unsafe {
        OffsetPageTable::new(
            &mut *(base.add(dtb as usize) as *mut PageTable),
            VirtAddr::from_ptr(base),
        )
    };
    let flags = F::PRESENT | F::WRITABLE;
    let mut rng = fastrand::Rng::with_seed(3);
    let mut mapped = Vec::new();
    // SAFETY (each map_to): frames and pages are fresh; nothing runs on
    // these tables; no TLB to flush.
    unsafe {
        mapper
            .map_to(
                Page::<Size1GiB>::containing_address(VirtAddr::new(0xffff_8880_0000_0000)),
                PhysFrame::<Size1GiB>::containing_address(PhysAddr::new(0)),
                flags | F::HUGE_PAGE,
                &mut bump,
            )
            .unwrap()
            .ignore();
        mapped.push((0xffff_8880_0000_0000u64, 1u64 << 30));
        for i in 0..8u64 {
            let va = 0xffff_ffff_8000_0000 + i * 0x40_0000;
            let pa = rng.u64(0..(40 << 20) >> 21) << 21;
            mapper
                .map_to(
                    Page::<Size2MiB>::containing_address(VirtAddr::new(va)),
                    PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(pa)),
                    flags | F::HUGE_PAGE,
                    &mut bump,
                )
                .unwrap()
                .ignore();
            mapped.push((va, 1 << 21));
        }
        for i in 0..64u64 {
            let va = 0x0000_5555_0000_0000 + i * 0x3000;
            let pa = rng.u64(0..(40 << 20) >> 12) << 12;
            mapper
                .map_to(
                    Page::<Size4KiB>::containing_address(VirtAddr::new(va)),
                    PhysFrame::<Size4KiB>::containing_address(PhysAddr::new(pa)),
                    flags,
                    &mut bump,
                )
                .unwrap()
                .ignore();
            mapped.push((va, 0x1000));
        }
    }
    let addrs: Vec<u64> = (0..3000)
        .map(|i| {
            let (va, size) = mapped[rng.usize(0..mapped.len())];
            if i % 4 == 0 {
                va + size + rng.u64(0..0x1000) // often just past a mapping
            } else {
                va + rng.u64(0..size)
            }
        })
        .collect();
    let oracle: Vec<Option<u64>> = addrs
        .iter()
        .map(|&va| mapper.translate_addr(VirtAddr::new(va)).map(|a| a.as_u64()))
        .collect();

    // SAFETY: `frames` is initialised plain bytes.
    let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, IMAGE_SIZE) };
    let mut memflow_mem = DummyMemory::new(IMAGE_SIZE);
    memflow_mem
        .phys_write(Address::null().into(), bytes)
        .unwrap();
    let translator = x64::new_translator(dtb.into());
    let (_dir, mem, _device) = open_image(bytes);
    let space = AddressSpace::new(mem.clone(), dtb, leechio::Paging::FourLevel);
    let ours = mem.block_on(join_all(addrs.iter().map(|&va| space.translate(va))));
    let mut sizes = std::collections::HashSet::new();
    for ((&va, t), expected) in addrs.iter().zip(&ours).zip(&oracle) {
        assert_eq!(
            t.as_ref().ok().map(|t| t.pa),
            *expected,
            "{va:#x} (x86_64 crate)"
        );
        let memflow = translator.virt_to_phys(&mut memflow_mem, va.into());
        assert_eq!(
            t.as_ref().ok().map(|t| t.pa),
            memflow.as_ref().ok().map(|p| p.address.to_umem()),
            "{va:#x} (memflow)"
        );
        if let (Ok(t), Ok(p)) = (t, memflow) {
            assert_eq!(t.page_size.bytes(), p.page_size(), "page size of {va:#x}");
            sizes.insert(t.page_size);
        }
    }
    assert_eq!(sizes.len(), 3, "all three page sizes were checked");
}
