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
        assert_eq!(ok, vec![(24, 32), (40, 48)]);
        let err = PartialError { failed: v, len: 48 };
        assert_eq!(err.failed_bytes(), 32);
        let mut buf = [0xffu8; 48];
        err.zero_fill(&mut buf);
        assert_eq!(buf.iter().filter(|&&b| b == 0).count(), 32);
        assert!(err
            .to_string()
            .starts_with("32 of 48 bytes failed in 3 range(s)"));
    }
}
