//! Reading a dump's extents from the target into its file, a chunk at a
//! time, until done, interrupted, out of disk or out of target; and what
//! was read and what failed, in file offsets.

use std::fs::File;
use std::os::unix::fs::FileExt;

use indicatif::ProgressBar;
use leechio::{Memory, PageError};

use super::layout::{overlaps, Extent, Segment};
use super::CHUNK;

/// What reading the extents did.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// The file's bytes gone through (read or failed), as `(offset, len)`
    /// in file order.
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

/// Reads the extents from physical memory, several in one device call (up
/// to [`CHUNK`] bytes: a process's pages are scattered in RAM), and writes
/// the bytes read to `file` at their offsets; failed bytes are left as
/// holes. Stops at a termination signal, a failed write or a device that
/// is gone.
pub(super) fn fill(mem: &Memory, extents: &[Extent], file: &File, bar: &ProgressBar) -> Outcome {
    let mut outcome = Outcome::default();
    let mut buf = vec![0u8; CHUNK as usize];
    // The next byte to read: an extent and how far into it.
    let (mut next, mut into) = (0usize, 0u64);
    while next < extents.len() {
        if crate::signals::arrived().is_some() {
            break;
        }
        // The batch: (file offset, physical address, bytes), at most a
        // chunk in all.
        let mut batch: Vec<(u64, u64, usize)> = Vec::new();
        let mut room = CHUNK;
        while room > 0 && next < extents.len() {
            let e = extents[next];
            let n = (e.len - into).min(room);
            batch.push((e.offset + into, e.pa + into, n as usize));
            room -= n;
            into += n;
            if into == e.len {
                (next, into) = (next + 1, 0);
            }
        }
        let total = (CHUNK - room) as usize;
        let read = {
            let mut rest = &mut buf[..total];
            let ops = batch.iter().map(|&(_, pa, n)| {
                let (this, after) = std::mem::take(&mut rest).split_at_mut(n);
                rest = after;
                (pa, this)
            });
            mem.read_now(ops)
        };
        // Only the bytes read are written: failed ones stay holes of the
        // file, which read as zeros and take no disk space (a wrong --dtb
        // can map gigabytes past the end of RAM). Runs that continue one
        // another in the buffer and the file are one write.
        let mut writes: Vec<(u64, usize, usize)> = Vec::new();
        let mut at_buf = 0usize;
        for (i, &(offset, _, n)) in batch.iter().enumerate() {
            read.for_each_success(i, n, |a, b| match writes.last_mut() {
                Some(w) if w.0 + w.2 as u64 == offset + a as u64 && w.1 + w.2 == at_buf + a => {
                    w.2 += b - a
                }
                _ => writes.push((offset + a as u64, at_buf + a, b - a)),
            });
            for f in read.failures(i) {
                outcome
                    .failed
                    .push((offset + f.offset as u64, f.len as u64, f.reason));
                if f.reason.is_device_lost() {
                    outcome.gone = Some(f.reason);
                }
            }
            at_buf += n;
        }
        let written = writes
            .iter()
            .try_for_each(|&(offset, from, n)| file.write_all_at(&buf[from..from + n], offset));
        if let Err(err) = written {
            outcome.write_error = Some(err);
            break;
        }
        for &(offset, _, n) in &batch {
            match outcome.written.last_mut() {
                Some(last) if last.0 + last.1 == offset => last.1 += n as u64,
                _ => outcome.written.push((offset, n as u64)),
            }
        }
        bar.inc(total as u64);
        if outcome.gone.is_some() {
            break;
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use leechio::{EngineConfig, MemBackend};

    #[cfg_attr(miri, ignore)]
    #[test]
    fn scattered_extents_are_read_together_and_failed_pages_stay_holes() {
        // Pages scattered in RAM, one after another in the file, the third
        // of them unreadable; then one past a chunk, read in a call of its
        // own.
        let backend = Arc::new(MemBackend::with_address_pattern(0x100_0000));
        backend.add_hole(0x30_2000..0x30_3000, PageError::UnsupportedRequest);
        let mem = Memory::with_config(backend.clone(), EngineConfig::default());
        let base = 0x4000;
        let extent = |i: u64, pa: u64, len: u64| Extent {
            offset: base + i * 0x1000,
            len,
            pa,
        };
        let extents = [
            extent(0, 0x90_0000, 0x1000),
            extent(1, 0x10_0000, 0x1000),
            extent(2, 0x30_1000, 0x2000),
            extent(4, 0x40_0000, CHUNK - 0x4000),
            extent(CHUNK / 0x1000, 0xa0_0000, 0x1000),
        ];
        let dir = tempfile::tempdir().unwrap();
        let file = File::create_new(dir.path().join("dump")).unwrap();
        let outcome = fill(&mem, &extents, &file, &ProgressBar::hidden());
        assert_eq!(backend.read_calls(), 2, "a chunk a call");
        let end = base + CHUNK + 0x1000;
        assert_eq!(outcome.written, [(base, CHUNK + 0x1000)]);
        assert_eq!(
            outcome.failed,
            [(base + 0x3000, 0x1000, PageError::UnsupportedRequest)]
        );
        let written = std::fs::read(dir.path().join("dump")).unwrap();
        assert_eq!(written.len() as u64, end);
        for e in &extents {
            for at in (0..e.len).step_by(8) {
                let o = (e.offset + at) as usize;
                let word = u64::from_le_bytes(written[o..o + 8].try_into().unwrap());
                let pa = e.pa + at;
                let want = if (0x30_2000..0x30_3000).contains(&pa) {
                    0
                } else {
                    pa
                };
                assert_eq!(word, want, "file offset {o:#x}");
            }
        }
    }

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
            pa: 0,
            len,
            flags: 4,
            offset,
            vma: Some(0),
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
