//! What a read or write reports: which bytes succeeded and which failed.

use std::fmt;

use crate::PageError;

/// A run of bytes of one request that failed, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Failure {
    /// Offset of the first failed byte in the request.
    pub offset: usize,
    /// Number of failed bytes.
    pub len: usize,
    /// Why they failed.
    pub reason: PageError,
}

impl Failure {
    /// Takes `next` into this failure when it starts where this one ends,
    /// for the same reason (so failures are reported as the fewest
    /// ranges); gives it back otherwise.
    pub(crate) fn absorb(&mut self, next: Failure) -> Option<Failure> {
        if next.reason == self.reason && self.offset + self.len == next.offset {
            self.len += next.len;
            None
        } else {
            Some(next)
        }
    }
}

/// `failures` sorted by offset, those that continue each other for the
/// same reason merged: the form [`PartialError::failed`] promises.
pub(crate) fn merged(mut failures: Vec<Failure>) -> Vec<Failure> {
    failures.sort_unstable_by_key(|f| f.offset);
    let mut merged: Vec<Failure> = Vec::with_capacity(failures.len());
    for f in failures {
        if let Some(f) = merged.last_mut().map_or(Some(f), |last| last.absorb(f)) {
            merged.push(f);
        }
    }
    merged
}

/// A piece of a request that completed, successfully or not. Pieces never
/// cross a page boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// Offset of the piece in the request.
    pub offset: usize,
    /// Length of the piece.
    pub len: usize,
    /// `Ok` when every byte of the piece was read (or written).
    pub result: Result<(), PageError>,
}

/// A read or write that failed in part (or whole): the exact failed byte
/// ranges, in order. Bytes not listed succeeded.
///
/// A failed byte of a read is never written: the caller's buffer keeps what
/// it held, unless the caller asked for zero-filling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialError {
    /// Failed ranges, sorted, disjoint; adjacent ranges have different
    /// reasons.
    pub failed: Vec<Failure>,
    /// Length of the whole request.
    pub len: usize,
}

impl PartialError {
    /// Total failed bytes.
    pub fn failed_bytes(&self) -> usize {
        self.failed.iter().map(|f| f.len).sum()
    }

    /// Whether no byte at all succeeded.
    pub fn is_total(&self) -> bool {
        self.failed_bytes() == self.len
    }

    /// Writes zeros over the failed bytes of `buf` (the request's buffer).
    pub fn zero_fill(&self, buf: &mut [u8]) {
        for f in &self.failed {
            buf[f.offset..f.offset + f.len].fill(0);
        }
    }
}

impl fmt::Display for PartialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} bytes failed in {} range(s):",
            self.failed_bytes(),
            self.len,
            self.failed.len()
        )?;
        for (i, fail) in self.failed.iter().enumerate().take(4) {
            let sep = if i == 0 { " " } else { ", " };
            write!(
                f,
                "{sep}+{:#x}..+{:#x} ({})",
                fail.offset,
                fail.offset + fail.len,
                fail.reason
            )?;
        }
        if self.failed.len() > 4 {
            write!(f, ", …")?;
        }
        Ok(())
    }
}

impl std::error::Error for PartialError {}

/// Calls `copy` for each run of `0..len` not covered by `failures` (in
/// order).
pub(crate) fn for_each_success<'f>(
    len: usize,
    failures: impl IntoIterator<Item = &'f Failure>,
    mut copy: impl FnMut(usize, usize),
) {
    let mut at = 0;
    for f in failures {
        if f.offset > at {
            copy(at, f.offset);
        }
        at = f.offset + f.len;
    }
    if at < len {
        copy(at, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successes_are_the_gaps_between_failures() {
        let fail = |offset, len, reason| Failure {
            offset,
            len,
            reason,
        };
        let v = vec![
            fail(0, 16, PageError::Unspecified),
            fail(16, 8, PageError::OutOfRange),
            fail(32, 8, PageError::OutOfRange),
        ];
        let mut ok = Vec::new();
        for_each_success(48, &v, |a, b| ok.push((a, b)));
        // Merged: the two ranges that continue each other for one reason,
        // not those with a gap or another reason, in any order given.
        let mut shuffled = vec![v[2], fail(40, 8, PageError::OutOfRange), v[1], v[0]];
        assert_eq!(
            merged(shuffled.clone()),
            vec![v[0], v[1], fail(32, 16, PageError::OutOfRange)]
        );
        shuffled.truncate(3);
        assert_eq!(
            merged(shuffled),
            vec![v[1], fail(32, 16, PageError::OutOfRange)]
        );
        assert_eq!(ok, vec![(24, 32), (40, 48)]);
        let err = PartialError {
            failed: merged(v.clone()),
            len: 48,
        };
        assert_eq!(err.failed_bytes(), 32);
        assert_eq!(err.failed, v);
        let mut buf = [0xffu8; 48];
        err.zero_fill(&mut buf);
        assert_eq!(buf.iter().filter(|&&b| b == 0).count(), 32);
        assert!(err
            .to_string()
            .starts_with("32 of 48 bytes failed in 3 range(s)"));
    }
}
