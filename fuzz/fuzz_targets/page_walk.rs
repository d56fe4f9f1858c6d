//! `AddressSpace::mappings` and `translate` on page tables built from the
//! input, against a plain walker that follows every path
//! (`leechio::vm::reference`): the mappings with their aliases written
//! out, the failed ranges, the bytes counted per half, and translations
//! of addresses at the range's ends, inside pages found and anywhere.
//!
//! Six table pages of 16 MiB of memory get a few present entries each:
//! tables (with stray flag bits), large pages (with bits below their
//! alignment), 4 KiB pages inside and past memory, addresses with bits at
//! and above MAXPHYADDR, and any 64-bit value. The rest of memory holds
//! its addresses, which read as entries not present.

#![no_main]

use std::sync::{Arc, OnceLock};

use leechio::vm::reference::{expand, mapped_bytes, misplaced_alias, mistranslated, Reference};
use leechio::vm::{detect_paging, AddressSpace, Paging, VmConfig};
use leechio::{EngineConfig, MemBackend, Memory};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const MIB: u64 = 1 << 20;
const MEMORY: u64 = 16 * MIB;
const PRESENT_RW: u64 = 0x3;
const PS: u64 = 1 << 7;
/// Present entries per table at most: the reference's work grows with
/// their fifth power.
const MAX_ENTRIES: u8 = 6;

/// The memory, made once: a run writes only its table pages.
fn memory() -> &'static (Memory, Arc<MemBackend>) {
    static MEMORY_AND_BACKEND: OnceLock<(Memory, Arc<MemBackend>)> = OnceLock::new();
    MEMORY_AND_BACKEND.get_or_init(|| {
        let backend = Arc::new(MemBackend::with_address_pattern(MEMORY as usize));
        let mem = Memory::with_config(backend.clone(), EngineConfig::default());
        (mem, backend)
    })
}

/// An entry: a table (of `tables`), a page, garbage or a faulty one.
fn entry(u: &mut Unstructured, tables: &[u64]) -> Result<u64> {
    let table = *u.choose(tables)?;
    let flags = |u: &mut Unstructured| -> Result<u64> {
        // Accessed, dirty, user, PWT/PCD, global, NX: ignored or kept.
        Ok(u.arbitrary::<u64>()? & 0x8000_0000_0000_017c)
    };
    Ok(match u.int_in_range(0..=8u8)? {
        0..=2 => table | PRESENT_RW | flags(u)?,
        3 => table | PRESENT_RW | PS,
        4 => {
            // A large page, maybe with one bit set from PAT (bit 12) to
            // a 1 GiB page's alignment: reserved but for PAT itself, and
            // for a 2 MiB page above its own alignment (bit 21).
            let base = u.int_in_range(0..=63u64)? << 21;
            let low_bit = match u.arbitrary()? {
                true => 1 << u.int_in_range(12..=29u64)?,
                false => 0,
            };
            base | PRESENT_RW | PS | low_bit | flags(u)?
        }
        5 => u.int_in_range(0..=8191u64)? << 12 | PRESENT_RW,
        6 => table | 1 << u.int_in_range(36..=51u64)? | PRESENT_RW,
        7 => (64 * MIB) | PRESENT_RW,
        _ => u.arbitrary::<u64>()? | 1,
    })
}

/// A byte of address space in either canonical half of `paging`.
fn canonical(u: &mut Unstructured, paging: Paging) -> Result<u64> {
    Ok(paging.sign_extend(u.arbitrary::<u64>()?))
}

fn run(u: &mut Unstructured) -> Result<()> {
    let (mem, backend) = memory();
    let tables: Vec<u64> = (0..6).map(|k| 8 * MIB + k * 0x1000).collect();
    for &t in &tables {
        backend.poke(t, &[0; 0x1000]);
    }
    for &t in &tables {
        for _ in 0..u.int_in_range(0..=MAX_ENTRIES)? {
            let i = match u.int_in_range(0..=5u8)? {
                0 => 0,
                1 => 1,
                2 => 255,
                3 => 256,
                4 => 511,
                _ => u.int_in_range(0..=511u64)?,
            };
            backend.poke(t + i * 8, &entry(u, &tables)?.to_le_bytes());
        }
    }
    let physical_bits = match u.int_in_range(0..=3u8)? {
        0 => 52,
        1 => 46,
        2 => 39,
        _ => u.arbitrary()?,
    };
    let paging = match u.arbitrary()? {
        true => Paging::FiveLevel,
        false => Paging::FourLevel,
    };
    let (lo, hi) = if u.arbitrary()? {
        (0, u64::MAX)
    } else {
        let mut ends = [canonical(u, paging)?, canonical(u, paging)?];
        ends.sort_unstable();
        (ends[0], ends[1])
    };
    let config = VmConfig {
        physical_address_bits: physical_bits,
        ..if u.arbitrary()? {
            VmConfig::UNCACHED
        } else {
            VmConfig::default()
        }
    };
    let dtb = tables[0];
    let space = AddressSpace::with_config(mem.clone(), dtb, paging, config);
    let found = mem.block_on(space.mappings(lo..=hi));
    let reference = Reference::walk(backend, MEMORY, physical_bits, paging, dtb, lo..=hi);
    // Whatever the tables hold, the mode is told or said unknown.
    let _ = mem.block_on(detect_paging(mem, dtb)).paging();
    assert_eq!(expand(&found), reference.mappings(), "{found:x?}");
    assert_eq!(misplaced_alias(&found), None);
    if (lo, hi) == (0, u64::MAX) {
        assert_eq!(
            mem.block_on(mapped_bytes(&space, &[(dtb, paging)])),
            vec![reference.mapped_bytes()]
        );
    }
    let mut vas = vec![lo, hi];
    for p in reference.pages.iter().take(8) {
        vas.push(p.0 + u.int_in_range(0..=p.2.bytes() - 1)?);
    }
    for _ in 0..u.int_in_range(0..=4u8)? {
        vas.push(u.arbitrary()?);
    }
    let wrong = mem.block_on(mistranslated(&space, &reference, dtb, vas));
    assert_eq!(wrong, None);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
