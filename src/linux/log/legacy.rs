//! The log buffer before 5.10: `log_buf` points at `log_buf_len` bytes of
//! records, each a `struct printk_log` header (its whole length, its text
//! length, time, level...) followed by its text, from `log_first_idx`
//! (sequence number `log_first_seq`) to `log_next_idx`. A header whose
//! length is 0 marks the end of the buffer: the next record is at its
//! start.
//!
//! Reads: the six variables (one batch), then the whole buffer (one).

use futures::future::join_all;

use super::{header, KernelLog, MAX_RECORDS, MAX_TEXT};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::LegacyLayout;
use crate::linux::structures::StructureFailure;

/// Where the buffer's variables are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Symbols {
    /// `char *log_buf`.
    pub buf: u64,
    /// `u32 log_buf_len`, `log_first_idx`, `log_next_idx`.
    pub len: u64,
    pub first_idx: u64,
    pub next_idx: u64,
    /// `u64 log_first_seq`, `log_next_seq`.
    pub first_seq: u64,
    pub next_seq: u64,
}

impl From<[u64; 6]> for Symbols {
    /// In the order of `LEGACY_SYMBOLS`.
    fn from(at: [u64; 6]) -> Symbols {
        Symbols {
            buf: at[0],
            len: at[1],
            first_idx: at[2],
            next_idx: at[3],
            first_seq: at[4],
            next_seq: at[5],
        }
    }
}

/// The log in the buffer whose variables are at `at`.
pub(super) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &LegacyLayout,
    at: &Symbols,
) -> KernelLog {
    let words = [
        (at.buf, 8),
        (at.len, 4),
        (at.first_idx, 4),
        (at.next_idx, 4),
        (at.first_seq, 8),
        (at.next_seq, 8),
    ];
    let read = join_all(words.iter().map(|&(va, len)| kmem.read_vec(va, len))).await;
    let mut values = [0u64; 6];
    for ((value, bytes), (va, len)) in values.iter_mut().zip(read).zip(words) {
        match bytes {
            Ok(b) if len == 8 => *value = b.u64_at(0).unwrap_or(0),
            Ok(b) => *value = u64::from(b.u32_at(0).unwrap_or(0)),
            Err(e) => return KernelLog::failed(va, format!("the log's variables: {e}")),
        }
    }
    let [buf, len, first_idx, next_idx, first_seq, next_seq] = values;
    if buf < kmem.kernel_half() {
        return KernelLog::failed(at.buf, format!("log_buf is {buf:#x}, not a kernel address"));
    }
    if len > MAX_TEXT.min(kmem.limit) || len < layout.header {
        return KernelLog::failed(
            at.len,
            format!("log_buf_len is {len}: over the {MAX_TEXT} bytes believed or the target's memory, or shorter than a record"),
        );
    }
    let bytes = match kmem.read_vec(buf, len as usize).await {
        Ok(bytes) => bytes,
        Err(e) => return KernelLog::failed(buf, format!("the log's buffer: {e}")),
    };
    records(
        layout,
        buf,
        &bytes,
        (first_idx, next_idx),
        (first_seq, next_seq),
    )
}

/// The records of `bytes` (the buffer, at `buf`) from index `first` to
/// `next`, numbered from `first_seq`; a walk that does not end at `next`
/// after `next_seq - first_seq` records says so.
fn records(
    layout: &LegacyLayout,
    buf: u64,
    bytes: &[u8],
    (first, next): (u64, u64),
    (first_seq, next_seq): (u64, u64),
) -> KernelLog {
    let mut log = KernelLog::default();
    let cut = |at: u64, why: String| StructureFailure::new(buf.wrapping_add(at), why);
    let len = bytes.len() as u64;
    let expected = next_seq.wrapping_sub(first_seq);
    // Every record takes a header's bytes at least.
    let most = (len / layout.header.max(1)).min(MAX_RECORDS);
    if expected > most {
        log.failed.push(cut(
            first,
            format!("log_first_seq {first_seq} and log_next_seq {next_seq}: more records than the buffer holds"),
        ));
        return log;
    }
    let (mut idx, mut seq, mut wrapped) = (first, first_seq, false);
    while idx != next {
        if seq.wrapping_sub(first_seq) >= expected {
            log.failed.push(cut(
                idx,
                format!(
                    "{expected} records read and the walk is not at log_next_idx {next:#x}: cut"
                ),
            ));
            break;
        }
        let Some(head) = bytes.bytes_at(idx, layout.header) else {
            log.failed.push(cut(
                idx,
                format!("a record at {idx:#x} would overrun the {len}-byte buffer: cut"),
            ));
            break;
        };
        let r = &layout.record;
        let size = r.len.and_then(|f| f.read(head)).unwrap_or(0);
        if size == 0 {
            // The end of the buffer: once, and only past the last record.
            if wrapped || idx < next {
                log.failed.push(cut(
                    idx,
                    format!("a record of length 0 at {idx:#x} where none can end the buffer: cut"),
                ));
                break;
            }
            (idx, wrapped) = (0, true);
            continue;
        }
        if size < layout.header || idx + size > len {
            log.failed.push(cut(idx, format!("a record of {size} bytes at {idx:#x} is shorter than its header or overruns the buffer: cut")));
            break;
        }
        let text_len = r.text_len.read(head).unwrap_or(u64::MAX);
        match header(r, head) {
            Some(mut record) if text_len <= size - layout.header => {
                let text = idx + layout.header;
                record.seq = seq;
                record.text = bytes[text as usize..(text + text_len) as usize].to_vec();
                log.records.push(record);
            }
            _ => log.failed.push(cut(
                idx,
                format!("log record {seq}: its text of {text_len} bytes overruns its {size}-byte record: garbage"),
            )),
        }
        idx += size;
        seq = seq.wrapping_add(1);
    }
    if idx == next && seq.wrapping_sub(first_seq) != expected {
        log.failed.push(cut(
            idx,
            format!("{} records from log_first_idx to log_next_idx, where the sequence numbers say {expected}", seq.wrapping_sub(first_seq)),
        ));
    }
    log
}
