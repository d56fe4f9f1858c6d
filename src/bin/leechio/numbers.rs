//! Numbers as people type them: hex (`0x…`) or decimal, `_` separators,
//! sizes with `k`/`m`/`g`, ranges as `START-END`.

/// A hex (`0x…`) or decimal number.
pub fn parse_number(text: &str) -> Result<u64, String> {
    let t = text.trim().replace('_', "");
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| format!("`{text}` is not a number (write 0x1000 or 4096)"))
}

/// A number with an optional `k`, `m` or `g` suffix (binary units).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, shift) = match t.trim_end_matches('b').chars().last() {
        Some('k') => (&t[..t.trim_end_matches('b').len() - 1], 10),
        Some('m') => (&t[..t.trim_end_matches('b').len() - 1], 20),
        Some('g') => (&t[..t.trim_end_matches('b').len() - 1], 30),
        _ => (t.as_str(), 0),
    };
    let n = parse_number(digits)
        .map_err(|_| format!("`{text}` is not a size (write 4096, 0x1000, 4k, 16m or 1g)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// `START-END` (end exclusive), both numbers.
pub fn parse_range(text: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = text
        .split_once('-')
        .ok_or_else(|| format!("`{text}` is not a range (write START-END, e.g. 0x1000-0x2000)"))?;
    let (start, end) = (parse_number(a)?, parse_number(b)?);
    if end <= start {
        return Err(format!("range `{text}` is empty or backwards"));
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_sizes_and_ranges() {
        assert_eq!(parse_number("0x1000"), Ok(0x1000));
        assert_eq!(parse_number("4096"), Ok(4096));
        assert_eq!(
            parse_number("0xffff_ffff_8100_0000"),
            Ok(0xffff_ffff_8100_0000)
        );
        assert!(parse_number("12zz").is_err());
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("2kb"), Ok(2048));
        assert_eq!(parse_size("0x10"), Ok(16));
        assert!(parse_size("lots").is_err());
        assert_eq!(parse_range("0x1000-0x3000"), Ok(0x1000..0x3000));
        assert!(parse_range("0x3000-0x1000").is_err());
        assert!(parse_range("0x3000").is_err());
    }
}
