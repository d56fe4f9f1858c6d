//! Reading a dump's extents from the target into its file, a chunk at a
//! time, until done, interrupted, out of disk or out of target; and what
//! was read and what failed, in file offsets.

use std::fs::File;
use std::os::unix::fs::FileExt;

use indicatif::ProgressBar;
use leechio::{AddressSpace, Memory, PageError};

use super::layout::{overlaps, Extent, Segment, Source};
use super::CHUNK;

/// What reading the extents did.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// Per extent begun, in file order: `(offset, len)` of its part that
    /// was gone through (read or failed).
    pub written: Vec<(u64, u64)>,
    /// `(offset, len, why)` of the file's bytes that could not be read,
    /// in file order: holes of the file.
    pub failed: Vec<(u64, u64, PageError)>,
    /// A write that failed (a full disk) ended the dump.
    pub write_error: Option<std::io::Error>,
    /// The device is gone (its QEMU exited, it stopped answering, its
    /// connection closed): nothing more could be read.
    pub gone: Option<PageError>,
}

impl Outcome {
    /// Bytes gone through, read or failed.
    pub fn written_bytes(&self) -> u64 {
        self.written.iter().map(|&(_, l)| l).sum()
    }

    /// Bytes that failed.
    pub fn failed_bytes(&self) -> u64 {
        self.failed.iter().map(|&(_, l, _)| l).sum()
    }

    /// The file's bytes that hold memory: gone through and not failed, as
    /// sorted, disjoint `(offset, len)`.
    pub fn read_ranges(&self) -> Vec<(u64, u64)> {
        let mut failed = self.failed.iter().peekable();
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut push = |o: u64, l: u64| match out.last_mut() {
            Some(last) if last.0 + last.1 == o => last.1 += l,
            _ if l > 0 => out.push((o, l)),
            _ => {}
        };
        for &(offset, len) in &self.written {
            let end = offset + len;
            let mut at = offset;
            while let Some(&&(fo, fl, _)) = failed.peek() {
                if fo >= end {
                    break;
                }
                push(at, fo - at);
                at = fo + fl;
                failed.next();
            }
            push(at, end - at);
        }
        out
    }

    /// The failed bytes as every segment over them shows them: `(address,
    /// len, why)`, sorted by address, neighbours with one reason merged.
    pub fn failed_in(&self, segments: &[Segment]) -> Vec<(u64, u64, String)> {
        let spans: Vec<(u64, u64)> = self.failed.iter().map(|&(o, l, _)| (o, l)).collect();
        let mut out = Vec::new();
        for s in segments {
            for (from, len) in overlaps(s.offset, s.len, &spans) {
                let at = s.offset + from;
                let i = spans.partition_point(|&(o, l)| o + l <= at);
                out.push((s.addr + from, len, self.failed[i].2.to_string()));
            }
        }
        out.sort_by_key(|f| f.0);
        let mut merged: Vec<(u64, u64, String)> = Vec::with_capacity(out.len());
        for f in out {
            match merged.last_mut() {
                Some(last) if last.0.checked_add(last.1) == Some(f.0) && last.2 == f.2 => {
                    last.1 += f.1
                }
                _ => merged.push(f),
            }
        }
        merged
    }
}

/// Reads each extent from the target (physical memory, or `space` for a
/// virtual source) and writes the bytes read to `file` at its offset;
/// failed bytes are left as holes. Stops at a termination signal, a
/// failed write or a device that is gone.
pub(super) fn fill(
    mem: &Memory,
    space: Option<&AddressSpace>,
    extents: &[Extent],
    file: &File,
    bar: &ProgressBar,
) -> Outcome {
    let mut outcome = Outcome::default();
    let mut buf = vec![0u8; CHUNK as usize];
    'extents: for e in extents {
        let mut done = 0;
        while done < e.len {
            if crate::signals::arrived().is_some() {
                break 'extents;
            }
            let n = (e.len - done).min(CHUNK) as usize;
            let chunk = &mut buf[..n];
            let failures: Vec<(usize, usize, PageError)> = match (e.source, space) {
                (Source::Virtual(va), Some(space)) => {
                    match mem.block_on(space.read(va + done, chunk)) {
                        Ok(()) => Vec::new(),
                        Err(err) => err
                            .failed
                            .iter()
                            .map(|f| (f.offset, f.len, f.reason))
                            .collect(),
                    }
                }
                (Source::Physical(pa), _) => mem
                    .read_now([(pa + done, &mut *chunk)])
                    .failures(0)
                    .map(|f| (f.offset, f.len, f.reason))
                    .collect(),
                (Source::Virtual(_), None) => vec![(0, n, PageError::NotMapped)],
            };
            // Only the bytes read are written: failed ones stay holes of
            // the file, which read as zeros and take no disk space (a
            // wrong --dtb can map gigabytes past the end of RAM).
            let at = e.offset + done;
            let mut result = Ok(());
            let mut from = 0;
            for (a, b) in failures
                .iter()
                .map(|&(offset, len, _)| (offset, offset + len))
                .chain([(n, n)])
            {
                if result.is_ok() && from < a {
                    result = file.write_all_at(&chunk[from..a], at + from as u64);
                }
                from = b;
            }
            if let Err(err) = result {
                outcome.write_error = Some(err);
                break 'extents;
            }
            for &(offset, len, reason) in &failures {
                outcome
                    .failed
                    .push((at + offset as u64, len as u64, reason));
                if reason.is_device_lost() {
                    outcome.gone = Some(reason);
                }
            }
            done += n as u64;
            match outcome.written.last_mut() {
                Some(last) if last.0 == e.offset => last.1 = done,
                _ => outcome.written.push((e.offset, done)),
            }
            bar.inc(n as u64);
            if outcome.gone.is_some() {
                break 'extents;
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_ranges_are_what_was_gone_through_less_what_failed() {
        let outcome = Outcome {
            written: vec![(0x1000, 0x4000), (0x9000, 0x2000)],
            failed: vec![
                (0x1000, 0x1000, PageError::NotMapped),
                (0x3000, 0x800, PageError::OutOfRange),
                (0xa000, 0x1000, PageError::NotMapped),
            ],
            ..Outcome::default()
        };
        assert_eq!(
            outcome.read_ranges(),
            [(0x2000, 0x1000), (0x3800, 0x1800), (0x9000, 0x1000)]
        );
        assert_eq!(outcome.failed_bytes(), 0x2800);
        assert_eq!(outcome.written_bytes(), 0x6000);
        // Two segments over the first extent (one an alias at another
        // address): each lists the failed bytes at its own addresses.
        let seg = |addr, offset, len| Segment {
            addr,
            pa: None,
            len,
            flags: 4,
            offset,
        };
        let failed = outcome.failed_in(&[
            seg(0x7000, 0x1000, 0x4000),
            seg(0x100, 0x3000, 0x1000),
            seg(0x900, 0x3000, 0x800),
        ]);
        assert_eq!(
            failed,
            [
                (0x100, 0x1000, PageError::OutOfRange.to_string()),
                (0x7000, 0x1000, PageError::NotMapped.to_string()),
                (0x9000, 0x800, PageError::OutOfRange.to_string()),
            ]
        );
    }
}
