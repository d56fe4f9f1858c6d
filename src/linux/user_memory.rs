//! A process's own memory, read through its page tables: the top table
//! its `mm->pgd` names, and the ranges of its user half an `mm` bounds
//! (the arguments, the environment).

use crate::linux::kmem::KernelMemory;
use crate::AddressSpace;

/// The physical address of the top table `pgd` (an `mm->pgd`) names: a
/// page of the direct map, or why not.
pub(crate) fn top_table(kmem: &KernelMemory<'_>, pgd: u64) -> Result<u64, String> {
    kmem.physical(pgd)
        .filter(|pa| pa % 0x1000 == 0)
        .ok_or_else(|| format!("its pgd {pgd:#x} is no page of the direct map"))
}

/// The bytes `start..end` of the user memory the tables at `dtb` map (an
/// `mm`'s bounds of its `what`: "arguments", "environment"): nothing when
/// `start >= end`; refused unread past the user half or past `max` bytes.
pub(crate) async fn read_range(
    kmem: &KernelMemory<'_>,
    dtb: u64,
    (start, end): (u64, u64),
    max: u64,
    what: &str,
) -> Result<Vec<u8>, String> {
    if start >= end {
        return Ok(Vec::new());
    }
    let paging = kmem.space.paging();
    if end > paging.lower_half_end() {
        return Err(format!(
            "{what} at {start:#x}..{end:#x} are not in user memory"
        ));
    }
    if end - start > max {
        return Err(format!(
            "{} bytes of {what} at {start:#x}, more than the {max} read",
            end - start
        ));
    }
    let space = AddressSpace::new(kmem.mem.clone(), dtb, paging);
    let mut bytes = vec![0u8; (end - start) as usize];
    space.read(start, &mut bytes).await.map_err(|e| {
        format!(
            "{} of the {} bytes of {what} at {start:#x} unreadable ({})",
            e.failed_bytes(),
            bytes.len(),
            e.failed
                .first()
                .map(|f| f.reason.to_string())
                .unwrap_or_default()
        )
    })?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::fake_memory::{FakeMemory, DIRECT};

    #[test]
    fn ranges_outside_the_user_half_or_past_the_bound_are_refused_unread() {
        let f = FakeMemory::new(1 << 16);
        let user_end = crate::vm::Paging::FourLevel.lower_half_end();
        let cases = [
            ((0x1000, 0x1000), Ok(0)),
            ((0x2000, 0x1000), Ok(0)),
            ((user_end - 8, user_end + 8), Err("are not in user memory")),
            (
                (0x1000, 0x1000 + 4097),
                Err("4097 bytes of environment at 0x1000, more than the 4096 read"),
            ),
        ];
        for (range, want) in cases {
            let (got, calls) =
                f.read(async |kmem| read_range(kmem, 0, range, 4096, "environment").await);
            match (got, want) {
                (Ok(bytes), Ok(len)) => assert_eq!(bytes.len(), len),
                (Err(why), Err(part)) => assert!(why.contains(part), "{why}"),
                (got, want) => panic!("{range:x?}: {got:?}, not {want:?}"),
            }
            assert_eq!(calls, 0, "{range:x?}");
        }
        // A page of the direct map names a table; anything else does not.
        let kmem_check = |pgd: u64| f.read(async |kmem| top_table(kmem, pgd)).0;
        assert_eq!(kmem_check(DIRECT + 0x3000), Ok(0x3000));
        assert!(kmem_check(DIRECT + 0x3008).is_err());
        assert!(kmem_check(0x3000).is_err());
    }
}
