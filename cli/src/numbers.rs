//! Numbers as people type them: hex (`0x…`) or decimal, `_` separators,
//! sizes with `k`/`m`/`g`, ranges as `START-END`; and as they are shown.

use std::ops::RangeInclusive;

/// `0x…`: how every command shows an address or a raw value.
pub fn hex(v: impl std::fmt::LowerHex) -> String {
    format!("{v:#x}")
}

/// A hex (`0x…`) or decimal number.
pub fn parse_number(text: &str) -> Result<u64, String> {
    u64::try_from(parse_wide(text)?).map_err(|_| format!("`{text}` does not fit in 64 bits"))
}

/// A hex or decimal number of up to 128 bits: room for the end of the
/// 64-bit address space, 2^64.
fn parse_wide(text: &str) -> Result<u128, String> {
    let t = text.trim().replace('_', "");
    let (digits, radix) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (t.as_str(), 10),
    };
    // (`from_str_radix` alone would take a sign.)
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(format!("`{text}` is not a number (write 0x1000 or 4096)"));
    }
    u128::from_str_radix(digits, radix).map_err(|_| format!("`{text}` does not fit in 64 bits"))
}

/// A length: a number with an optional unit, `k`, `m` or `g` (binary),
/// each also as `kb`/`kib` and so on. Anything else after the number is an
/// error, not ignored, and so is 0 (which would read nothing).
pub fn parse_size(text: &str) -> Result<u64, String> {
    const HINT: &str = "write 4096, 0x1000, 4k, 16m or 1g";
    let t = text.trim().to_ascii_lowercase();
    // The number is what hex or decimal digits make of the start (hex
    // digits include `b`, so `0x1b` stays a number); the rest is the unit.
    let digits_end = match t.strip_prefix("0x") {
        Some(hex) => {
            2 + hex
                .find(|c: char| !c.is_ascii_hexdigit() && c != '_')
                .unwrap_or(hex.len())
        }
        None => t
            .find(|c: char| !c.is_ascii_digit() && c != '_')
            .unwrap_or(t.len()),
    };
    let (digits, unit) = t.split_at(digits_end);
    let shift = match unit {
        "" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ if digits.is_empty() || digits == "0x" => {
            return Err(format!("`{text}` is not a size ({HINT})"))
        }
        _ => {
            return Err(format!(
                "`{text}` is not a size: `{}` after the number is not a unit (k, m or g; {HINT})",
                &text.trim()[digits_end..]
            ))
        }
    };
    let n = parse_number(digits).map_err(|_| format!("`{text}` is not a size ({HINT})"))?;
    match n.checked_mul(1 << shift) {
        Some(0) => Err(format!("`{text}` is no length: give 1 or more bytes")),
        Some(n) => Ok(n),
        None => Err(format!("`{text}` is too large")),
    }
}

/// The end of the 64-bit address space, as a range's exclusive end.
const SPACE_END: u128 = 1 << 64;

/// `START-END`, END exclusive, as the first and last address. END may be
/// 2^64 (`0x1_0000_0000_0000_0000`), so that a range can hold the last
/// byte of the address space.
pub fn parse_range(text: &str) -> Result<RangeInclusive<u64>, String> {
    const HINT: &str = "write START-END, e.g. 0x1000-0x2000";
    let (a, b) = text
        .split_once('-')
        .ok_or_else(|| format!("`{text}` is not a range ({HINT})"))?;
    if a.trim().is_empty() {
        return Err(format!("range `{text}` has no start ({HINT})"));
    }
    if b.trim().is_empty() {
        return Err(format!("range `{text}` has no end ({HINT})"));
    }
    let (start, end) = (parse_number(a)?, parse_wide(b)?);
    if end > SPACE_END {
        return Err(format!(
            "range `{text}` ends past the end of the address space (2^64, 0x1_0000_0000_0000_0000)"
        ));
    }
    if end <= u128::from(start) {
        return Err(format!("range `{text}` is empty or backwards"));
    }
    Ok(start..=(end - 1) as u64)
}

/// `range` as `START-END` (END exclusive), as `parse_range` reads it.
pub fn show_range(range: &RangeInclusive<u64>) -> String {
    format!("{:#x}-{:#x}", range.start(), u128::from(*range.end()) + 1)
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
        for signed in ["+4096", "0x+10", "-1"] {
            assert!(parse_number(signed).is_err(), "{signed}");
        }
        assert_eq!(
            parse_number("0x1_0000_0000_0000_0000"),
            Err("`0x1_0000_0000_0000_0000` does not fit in 64 bits".into())
        );
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("2kb"), Ok(2048));
        assert_eq!(parse_size("0x10"), Ok(16));
        assert_eq!(parse_size("3KiB"), Ok(3072));
        assert_eq!(parse_size("0x1b"), Ok(0x1b));
        assert_eq!(parse_size("0x10k"), Ok(0x4000));
        assert!(parse_size("lots").is_err());
        assert_eq!(
            parse_size("0k"),
            Err("`0k` is no length: give 1 or more bytes".into())
        );
        assert!(parse_size("").is_err());
        assert!(parse_size("0x").is_err());
        let garbage = parse_size("4kbbb").unwrap_err();
        assert!(garbage.contains("`kbbb` after the number"), "{garbage}");
        assert!(parse_size("4b").is_err());
        assert!(parse_size("16m2").is_err());
        assert_eq!(parse_range("0x1000-0x3000"), Ok(0x1000..=0x2fff));
        assert_eq!(
            parse_range("0xffff_8000_0000_0000-0x1_0000_0000_0000_0000"),
            Ok(0xffff_8000_0000_0000..=u64::MAX)
        );
        assert_eq!(
            show_range(&(0xf000..=u64::MAX)),
            "0xf000-0x10000000000000000"
        );
        assert!(parse_range("0-0x1_0000_0000_0000_0001")
            .unwrap_err()
            .contains("past the end of the address space"));
        assert!(parse_range("0x1_0000_0000_0000_0000-0x1_0000_0000_0000_0001").is_err());
        assert!(parse_range("0x3000-0x1000").is_err());
        assert!(parse_range("0x3000").is_err());
        let no_start = parse_range("-0x1000").unwrap_err();
        assert!(no_start.contains("has no start"), "{no_start}");
        let no_end = parse_range("0x1000-").unwrap_err();
        assert!(no_end.contains("has no end"), "{no_end}");
    }
}
