//! The hooks' walks on made-up memory: an ftrace list that ends, loops
//! or holds a wild link, and a system-call table of garbage.

use super::*;
use crate::linux::fake_memory::FakeMemory;

/// `ftrace_ops.func`, `ftrace_ops.next`.
const OPS: (u64, u64) = (0, 8);

#[test]
fn the_ftrace_list_to_its_sentinel_and_a_loop_or_wild_link_cut() {
    let mut f = FakeMemory::new(1 << 16);
    let end = f.alloc(64);
    let head = f.alloc(8);
    let [a, b] = [0; 2].map(|_| f.alloc(64));
    f.put(head, a);
    f.put(a + OPS.0, 0xffff_ffff_8100_1000);
    f.put(a + OPS.1, b);
    f.put(b + OPS.0, 0xffff_ffff_c000_2000);
    f.put(b + OPS.1, end);
    let ((found, failed), calls) =
        f.read(async |kmem| ftrace_callbacks(kmem, OPS, head, end).await);
    assert_eq!(
        found,
        [(a, 0xffff_ffff_8100_1000), (b, 0xffff_ffff_c000_2000)]
    );
    assert_eq!(failed, []);
    // The head, then a call a callback.
    assert_eq!(calls, 3);
    // b leads back to a: cut at a, each read once.
    f.put(b + OPS.1, a);
    let ((found, failed), _) = f.read(async |kmem| ftrace_callbacks(kmem, OPS, head, end).await);
    assert_eq!(found.len(), 2);
    assert_eq!(failed.len(), 1);
    assert!(failed[0].reason.contains("loops"), "{failed:?}");
    // b leads to a user address: cut there.
    f.put(b + OPS.1, 0x40_0000);
    let ((found, failed), _) = f.read(async |kmem| ftrace_callbacks(kmem, OPS, head, end).await);
    assert_eq!(found.len(), 2);
    assert!(failed[0].reason.contains("no kernel address"), "{failed:?}");
    // The list's head itself unreadable.
    let past = crate::linux::fake_memory::DIRECT + (1 << 20);
    let ((found, failed), _) = f.read(async |kmem| ftrace_callbacks(kmem, OPS, past, end).await);
    assert!(found.is_empty());
    assert!(failed[0].reason.starts_with(FTRACE_LIST), "{failed:?}");
}

#[test]
fn every_entry_outside_the_text_is_reported_and_padding_dropped() {
    let text = 0xffff_ffff_8100_0000..0xffff_ffff_8200_0000u64;
    let module = 0xffff_ffff_c000_0000..0xffff_ffff_c000_1000u64;
    let inside = |t: u64| text.contains(&t) || module.contains(&t);
    let name = |t: u64| (t == u64::MAX).then(|| "everything".to_string());
    let words = [
        0xffff_ffff_8100_0010,
        0,
        u64::MAX,
        0x40_1000,
        0xffff_ffff_c000_0800,
        0xffff_ffff_c000_1000,
        0,
        0,
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    // Up to the next symbol: the last two zeros are padding.
    let entries = table_entries(&bytes, true);
    assert_eq!(entries.len(), 6);
    assert_eq!(table_entries(&bytes, false).len(), 8);
    assert_eq!(table_entries(&bytes[..13], false).len(), 1);
    let base = 0xffff_ffff_8300_0000;
    let slots = entries
        .iter()
        .enumerate()
        .map(|(i, &t)| (i, base + 8 * i as u64, t));
    let hooks = outside(HookTable::Syscalls, slots, &inside, &name);
    let got: Vec<(usize, u64, Option<&str>)> = hooks
        .iter()
        .map(|h| (h.index, h.target, h.points_into.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (1, 0, None),
            (2, u64::MAX, Some("everything")),
            (3, 0x40_1000, None),
            (5, 0xffff_ffff_c000_1000, None),
        ]
    );
    assert_eq!(hooks[0].slot, base + 8);
}
