//! The lockless ring buffer of 5.10 on (`kernel/printk/printk_ringbuffer.c`):
//! `prb` points at a `struct printk_ringbuffer`, whose descriptor ring
//! holds `2^count_bits` descriptors (`struct prb_desc`, each a state and
//! id word and where its text block lies) beside as many `struct
//! printk_info` (sequence number, time, level, ...), and whose data ring
//! holds `2^size_bits` bytes of text blocks, each starting with the id of
//! its record. The records from `tail_id` to `head_id` are walked in id
//! order.
//!
//! Reads: `prb` and both static rings the kernel has (one batch); the ring
//! `prb` points at, when it is neither (one more); its descriptors, infos
//! and text (one batch).

use futures::future::join_all;
use futures::join;

use super::{header, KernelLog, LogRecord, MAX_RECORDS, MAX_TEXT};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::RingLayout;
use crate::linux::structures::StructureFailure;

/// A descriptor's state and id word: the state in the top 2 bits of a
/// long (`DESC_FLAGS_SHIFT`), the id below.
const STATE_SHIFT: u32 = 62;
const ID_MASK: u64 = (1 << STATE_SHIFT) - 1;
/// Logical positions with bit 0 set name no data block: `NO_LPOS`, a
/// record with no text; `FAILED_LPOS`, one whose text could not be stored.
const NO_LPOS: u64 = 3;
/// A text block starts with its record's id (a long).
const ID_SIZE: u64 = 8;

/// The ring's header as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ring {
    /// Where the ring was read.
    at: u64,
    count_bits: u32,
    descs: u64,
    infos: u64,
    head_id: u64,
    tail_id: u64,
    size_bits: u32,
    data: u64,
}

/// The log in the ring `prb` points at; `statics` are the kernel's own
/// rings, read beside `prb` in case it points at one.
pub(super) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &RingLayout,
    prb: u64,
    statics: &[u64],
) -> KernelLog {
    let size = layout.size as usize;
    let (pointer, rings) = join!(
        kmem.read_vec(prb, 8),
        join_all(statics.iter().map(|&at| kmem.read_vec(at, size)))
    );
    let pointer = match pointer {
        Ok(bytes) => bytes.u64_at(0).unwrap_or(0),
        Err(e) => return KernelLog::failed(prb, format!("prb, the log's pointer: {e}")),
    };
    let known = statics.iter().zip(rings).find(|(at, _)| **at == pointer);
    let bytes = match known {
        Some((_, Ok(bytes))) => bytes,
        _ if pointer < kmem.kernel_half() => {
            return KernelLog::failed(prb, format!("prb is {pointer:#x}, not a kernel address"))
        }
        _ => match kmem.read_vec(pointer, size).await {
            Ok(bytes) => bytes,
            Err(e) => return KernelLog::failed(pointer, format!("the log's ring: {e}")),
        },
    };
    let ring = match parse(layout, pointer, &bytes, kmem) {
        Ok(ring) => ring,
        Err(why) => return KernelLog::failed(pointer, why),
    };
    let count = 1u64 << ring.count_bits;
    let (descs, infos, data) = join!(
        kmem.read_vec(ring.descs, (count * layout.desc_size) as usize),
        kmem.read_vec(ring.infos, (count * layout.info_size) as usize),
        kmem.read_vec(ring.data, 1 << ring.size_bits),
    );
    let failed =
        |at, what: &str, e: String| KernelLog::failed(at, format!("the log's {what}: {e}"));
    match (descs, infos, data) {
        (Ok(d), Ok(i), Ok(t)) => records(layout, &ring, &d, &i, &t),
        (Err(e), _, _) => failed(ring.descs, "descriptors", e),
        (_, Err(e), _) => failed(ring.infos, "record infos", e),
        (_, _, Err(e)) => failed(ring.data, "text", e),
    }
}

/// The ring's header in `bytes`, read at `at`, checked against the bounds
/// (see the parent module) and the target.
fn parse(
    layout: &RingLayout,
    at: u64,
    bytes: &[u8],
    kmem: &KernelMemory<'_>,
) -> Result<Ring, String> {
    let short = || format!("the log's ring at {at:#x}: short read");
    let field = |f: crate::linux::offsets::Int| f.read(bytes).ok_or_else(short);
    let ring = Ring {
        at,
        count_bits: field(layout.count_bits)? as u32,
        descs: field(layout.descs)?,
        infos: field(layout.infos)?,
        head_id: field(layout.head_id)?,
        tail_id: field(layout.tail_id)?,
        size_bits: field(layout.size_bits)? as u32,
        data: field(layout.data)?,
    };
    let max_count_bits = MAX_RECORDS.trailing_zeros();
    let max_size_bits = MAX_TEXT.trailing_zeros();
    if ring.count_bits > max_count_bits || !(4..=max_size_bits).contains(&ring.size_bits) {
        return Err(format!(
            "the log's ring claims 2^{} records and 2^{} bytes of text: over the 2^{max_count_bits} and 2^{max_size_bits} believed, or garbage",
            ring.count_bits, ring.size_bits
        ));
    }
    let count = 1u64 << ring.count_bits;
    let spans = [
        ("descriptors", ring.descs, count * layout.desc_size),
        ("record infos", ring.infos, count * layout.info_size),
        ("text", ring.data, 1 << ring.size_bits),
    ];
    for (what, start, len) in spans {
        if start < kmem.kernel_half() || start.checked_add(len).is_none() {
            return Err(format!(
                "the log's {what} would be at {start:#x}: not a kernel address"
            ));
        }
    }
    let total: u64 = spans.iter().map(|s| s.2).sum();
    if total > kmem.limit {
        return Err(format!(
            "the log's ring would take {total} bytes, more than the target's memory"
        ));
    }
    Ok(ring)
}

/// The records of `ring` from its descriptors, infos and text as read.
fn records(layout: &RingLayout, ring: &Ring, descs: &[u8], infos: &[u8], data: &[u8]) -> KernelLog {
    let count = 1u64 << ring.count_bits;
    let (head, tail) = (ring.head_id & ID_MASK, ring.tail_id & ID_MASK);
    let mut log = KernelLog::default();
    let mut span = head.wrapping_sub(tail) & ID_MASK;
    if span >= count {
        log.failed.push(StructureFailure::new(
            ring.at,
            format!(
                "the log's oldest record ({tail}) and newest ({head}) are further apart than its {count} descriptors: only the newest {count} read"
            ),
        ));
        span = count - 1;
    }
    let first = head.wrapping_sub(span) & ID_MASK;
    for k in 0..=span {
        let id = first.wrapping_add(k) & ID_MASK;
        let index = id & (count - 1);
        match record(layout, ring, id, descs, infos, data) {
            Ok(Some(record)) => log.records.push(record),
            Ok(None) => {}
            Err(why) => log.failed.push(StructureFailure::new(
                ring.descs + index * layout.desc_size,
                format!("log record {id}: {why}"),
            )),
        }
    }
    log.records.sort_by_key(|r| r.seq);
    log
}

/// Record `id`: `None` when its descriptor is free for reuse (its text
/// given up to newer records, as the kernel's reader skips it); why not,
/// when it is not shown.
fn record(
    layout: &RingLayout,
    ring: &Ring,
    id: u64,
    descs: &[u8],
    infos: &[u8],
    data: &[u8],
) -> Result<Option<LogRecord>, String> {
    let count = 1u64 << ring.count_bits;
    let index = id & (count - 1);
    let desc = descs
        .bytes_at(index * layout.desc_size, layout.desc_size)
        .ok_or("its descriptor lies outside what was read")?;
    let info = infos
        .bytes_at(index * layout.info_size, layout.info_size)
        .ok_or("its info lies outside what was read")?;
    let word = |f: crate::linux::offsets::Int| f.read(desc).ok_or("short descriptor");
    let state_var = word(layout.state_var)?;
    let (state, desc_id) = (state_var >> STATE_SHIFT, state_var & ID_MASK);
    if desc_id != id {
        return Err(
            match desc_id.wrapping_sub(id) & ID_MASK < 1 << (STATE_SHIFT - 1) {
                true => {
                    format!("overwritten while read (its descriptor holds record {desc_id} now)")
                }
                false => format!("its descriptor holds record {desc_id}, an older one: garbage"),
            },
        );
    }
    let s = &layout.states;
    match state {
        _ if state == s.reusable => return Ok(None),
        _ if state == s.reserved => return Err("being written (reserved): not shown".into()),
        _ if state == s.committed || state == s.finalized => {}
        _ => return Err(format!("its state {state} is none the kernel has")),
    }
    let mut record = header(&layout.info, info).ok_or("short info")?;
    if record.seq & (count - 1) != index {
        return Err(format!(
            "its sequence number {} does not belong at descriptor {index}: garbage",
            record.seq
        ));
    }
    let text_len = layout.info.text_len.read(info).ok_or("short info")?;
    let (begin, next) = (word(layout.begin)?, word(layout.next)?);
    if begin & 1 == 1 {
        return match (begin, next) {
            (NO_LPOS, NO_LPOS) => Ok(Some(record)),
            _ => Err(format!(
                "it has no text block ({begin:#x}..{next:#x}): its text could not be stored"
            )),
        };
    }
    let size = 1u64 << ring.size_bits;
    let wraps = |lpos: u64| lpos >> ring.size_bits;
    let (start, len) = if wraps(begin) == wraps(next) && begin < next {
        (begin & (size - 1), next - begin)
    } else if wraps(begin.wrapping_add(size)) == wraps(next) {
        // A block that would wrap is kept whole at the ring's start.
        (0, next & (size - 1))
    } else {
        return Err(format!(
            "its text block {begin:#x}..{next:#x} is no block of a {size}-byte ring: garbage"
        ));
    };
    if begin % ID_SIZE != 0 || next % ID_SIZE != 0 || len < ID_SIZE {
        return Err(format!(
            "its text block {begin:#x}..{next:#x} is not a block (unaligned, or shorter than its id): garbage"
        ));
    }
    let block = data
        .bytes_at(start, len)
        .ok_or_else(|| format!("its text block {begin:#x}..{next:#x} lies outside the ring"))?;
    let block_id = block.u64_at(0).ok_or("short text block")?;
    if block_id != id {
        return Err(format!(
            "its text block belongs to record {block_id}: overwritten while read, or garbage"
        ));
    }
    if text_len > len - ID_SIZE {
        return Err(format!(
            "its text of {text_len} bytes overruns its {}-byte block: garbage",
            len - ID_SIZE
        ));
    }
    record.text = block[ID_SIZE as usize..(ID_SIZE + text_len) as usize].to_vec();
    Ok(Some(record))
}
