//! The physical memory map: which address ranges hold memory, and where
//! each range is found in the device (its "remap" address).

use std::fmt;
use std::str::FromStr;

use leechcore_sys::PAGE_SIZE;

/// One range of physical memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemoryRange {
    /// First physical address of the range.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Where `start` is found in the device (for a file: its offset).
    pub remap: u64,
}

impl MemoryRange {
    /// A range found at its own address in the device.
    pub fn new(start: u64, size: u64) -> Self {
        MemoryRange {
            start,
            size,
            remap: start,
        }
    }

    /// One past the last address of the range.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }

    /// Whether `addr` lies in the range.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < self.size
    }
}

/// Why a memory map was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryMapError {
    /// A line of text could not be read as a range.
    #[error("line {line}: {reason} in `{text}`")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// The offending line, control characters escaped.
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A range is not whole pages, is empty or runs past `u64::MAX`.
    #[error("range {start:#x}+{size:#x}: {reason}")]
    BadRange {
        /// Start of the range.
        start: u64,
        /// Size of the range.
        size: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two ranges overlap or are out of order.
    #[error("range at {second:#x} overlaps or precedes the range ending at {first_end:#x}; ranges must be sorted and disjoint")]
    Overlap {
        /// End of the earlier range.
        first_end: u64,
        /// Start of the later range.
        second: u64,
    },
}

/// A validated memory map: page-aligned, non-empty, sorted, disjoint ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryMap {
    ranges: Vec<MemoryRange>,
}

impl MemoryMap {
    /// Checks and wraps `ranges` (which must already be sorted).
    pub fn new(ranges: Vec<MemoryRange>) -> Result<Self, MemoryMapError> {
        for r in &ranges {
            let bad = |reason| MemoryMapError::BadRange {
                start: r.start,
                size: r.size,
                reason,
            };
            if r.size == 0 {
                return Err(bad("empty"));
            }
            if r.start % PAGE_SIZE != 0 || r.size % PAGE_SIZE != 0 || r.remap % PAGE_SIZE != 0 {
                return Err(bad("start, size and remap must be multiples of 0x1000"));
            }
            if r.start.checked_add(r.size).is_none() || r.remap.checked_add(r.size).is_none() {
                return Err(bad("runs past the end of the address space"));
            }
        }
        for pair in ranges.windows(2) {
            if pair[1].start < pair[0].end() {
                return Err(MemoryMapError::Overlap {
                    first_end: pair[0].end(),
                    second: pair[1].start,
                });
            }
        }
        Ok(MemoryMap { ranges })
    }

    /// The ranges with everything at or past `limit` cut off, where a
    /// range's place is `at` (its start, or its remap).
    pub(crate) fn cut_at(&self, limit: u64, at: impl Fn(&MemoryRange) -> u64) -> Vec<MemoryRange> {
        self.ranges
            .iter()
            .filter(|r| at(r) < limit)
            .map(|r| MemoryRange {
                size: r.size.min(limit - at(r)),
                ..*r
            })
            .collect()
    }

    /// The ranges, in address order.
    pub fn ranges(&self) -> &[MemoryRange] {
        &self.ranges
    }

    /// Whether there is no range at all.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The range holding `addr`, if any.
    pub fn find(&self, addr: u64) -> Option<&MemoryRange> {
        let i = self.ranges.partition_point(|r| r.end() <= addr);
        self.ranges.get(i).filter(|r| r.contains(addr))
    }

    /// One past the highest mapped address (0 when empty).
    pub fn end(&self) -> u64 {
        self.ranges.last().map_or(0, MemoryRange::end)
    }

    /// Total bytes of memory in the map.
    pub fn total_size(&self) -> u64 {
        self.ranges.iter().map(|r| r.size).sum()
    }
}

/// Parses LeechCore's memory map text. Accepts both the layout LeechCore
/// prints (`0000  1000 - 1fff ->  1000`) and the one it reads
/// (`1000 1fff [remap]`); numbers are hex with or without `0x`, ends are
/// inclusive, blank lines and `#` comments are skipped.
impl FromStr for MemoryMap {
    type Err = MemoryMapError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut ranges = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw
                .split('#')
                .next()
                .unwrap_or("")
                .trim()
                .trim_end_matches('\0');
            if line.is_empty() {
                continue;
            }
            let syntax = |reason| MemoryMapError::Syntax {
                line: i + 1,
                text: crate::printable(raw),
                reason,
            };
            let tokens: Vec<&str> = line.split_whitespace().collect();
            let numbers: Vec<&str> = match tokens.as_slice() {
                [_, start, "-", end, "->", remap] | [start, "-", end, "->", remap] => {
                    vec![start, end, remap]
                }
                [_, _] | [_, _, _] => tokens.clone(),
                _ => {
                    return Err(syntax(
                        "expected `start end [remap]` or `index start - end -> remap`",
                    ))
                }
            };
            let mut values = [0u64; 3];
            for (v, t) in values.iter_mut().zip(&numbers) {
                let digits = t
                    .strip_prefix("0x")
                    .or_else(|| t.strip_prefix("0X"))
                    .unwrap_or(t);
                *v = u64::from_str_radix(digits, 16).map_err(|_| syntax("not a hex number"))?;
            }
            let [start, last, remap] = values;
            let remap = if numbers.len() == 3 { remap } else { start };
            if last < start {
                return Err(syntax("end is below start"));
            }
            let size = (last - start)
                .checked_add(1)
                .ok_or_else(|| syntax("range covers all of u64"))?;
            ranges.push(MemoryRange { start, size, remap });
        }
        ranges.sort_by_key(|r| r.start);
        MemoryMap::new(ranges)
    }
}

/// Prints the map in the layout LeechCore itself prints
/// (`LC_CMD_MEMMAP_GET`), which `from_str` reads back.
impl fmt::Display for MemoryMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            writeln!(
                f,
                "{i:04x} {:16x} - {:16x} -> {:16x}",
                r.start,
                r.end() - 1,
                r.remap
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_layouts_and_prints_what_it_parsed() {
        let text =
            "# from a tool\n0000  1000 -  1fff -> 1000\n0x3000 0x5fff 0x10000\n\n8000 8fff\n";
        let map: MemoryMap = text.parse().unwrap();
        assert_eq!(
            map.ranges(),
            &[
                MemoryRange::new(0x1000, 0x1000),
                MemoryRange {
                    start: 0x3000,
                    size: 0x3000,
                    remap: 0x10000
                },
                MemoryRange::new(0x8000, 0x1000),
            ]
        );
        assert_eq!(map.to_string().parse::<MemoryMap>().unwrap(), map);
        assert_eq!(map.total_size(), 0x5000);
        assert_eq!(map.end(), 0x9000);
        assert_eq!(map.find(0x3fff).map(|r| r.start), Some(0x3000));
        assert_eq!(map.find(0x6000), None);
        assert_eq!(map.find(0x8fff).map(|r| r.start), Some(0x8000));
    }

    #[test]
    fn refuses_malformed_text_with_the_line() {
        for (text, line) in [
            ("1000 1fff\nzzzz 1fff\n", 2),
            ("1000\n", 1),
            ("2000 1fff\n", 1),
            ("1000 - 1fff 1000\n", 1),
        ] {
            match text.parse::<MemoryMap>() {
                Err(MemoryMapError::Syntax { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn an_error_quotes_control_characters_escaped_on_one_line() {
        // Found by the fuzz target memory_map: a lone `\r` (or an escape
        // sequence) inside a line reached the message as it was.
        let err = "1000 1fff\n\r]\x1b[2J 1000\n"
            .parse::<MemoryMap>()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 2: not a hex number in `\\r]\\u{1b}[2J 1000`"
        );
    }

    #[test]
    fn refuses_unaligned_overlapping_and_overflowing_ranges() {
        assert!(matches!(
            "1000 1ffe".parse::<MemoryMap>(),
            Err(MemoryMapError::BadRange { .. })
        ));
        assert!(matches!(
            "1000 2fff\n2000 3fff".parse::<MemoryMap>(),
            Err(MemoryMapError::Overlap {
                first_end: 0x3000,
                second: 0x2000
            })
        ));
        assert!(matches!(
            "fffffffffffff000 ffffffffffffffff".parse::<MemoryMap>(),
            Err(MemoryMapError::BadRange { .. })
        ));
    }
}
