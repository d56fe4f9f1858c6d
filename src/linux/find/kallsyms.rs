//! The kernel's own symbol table (`/proc/kallsyms`), found by its shape in
//! the kernel's read-only data and decoded there.
//!
//! The tables, each 8-byte aligned, as `scripts/kallsyms.c` lays them out:
//! `kallsyms_offsets` (`i32` per symbol) and `kallsyms_relative_base`
//! (`u64`), `kallsyms_num_syms` (`u32`), `kallsyms_names` (per symbol a
//! length, one byte or two as ULEB128, then that many token indices),
//! `kallsyms_markers` (`u32` offset into the names every 256 symbols),
//! perhaps `kallsyms_seqs_of_names`, `kallsyms_token_table` (256
//! NUL-terminated tokens) and `kallsyms_token_index` (256 `u16` offsets of
//! the tokens). Newer kernels put the offsets and the base after the token
//! index; both places are tried. Each table is checked against the others
//! before a name is trusted.

use std::collections::HashMap;

/// Longest token accepted (tokens are pairs of pairs; real ones are a few
/// bytes).
const MAX_TOKEN: usize = 64;
/// Most symbols accepted (a kernel has about 100,000).
const MAX_SYMBOLS: u32 = 1 << 22;
/// How far before the token table the names may start.
const NAMES_WINDOW: usize = 32 << 20;
/// Most candidate name tables walked in full, so crafted memory cannot
/// make the search quadratic.
const MAX_FULL_WALKS: usize = 64;
/// Symbols decoded and checked before a candidate name table is walked.
const PROBE_NAMES: usize = 16;

/// Addresses of the kernel symbols asked for, from the tables in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Symbols {
    /// Address of each name asked for that the table holds.
    pub addresses: HashMap<String, u64>,
    /// Symbols in the table.
    pub count: u32,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn align8(x: usize) -> usize {
    (x + 7) & !7
}

/// The token table and its index.
struct Tokens<'a> {
    /// Offset of `kallsyms_token_index`.
    index_at: usize,
    tokens: Vec<&'a [u8]>,
}

/// Finds `kallsyms_token_index` (256 increasing `u16`s from 0) with the
/// token table right before it that it describes.
fn find_tokens(b: &[u8]) -> Option<Tokens<'_>> {
    (0..b.len().saturating_sub(512))
        .step_by(8)
        .find_map(|at| tokens_at(b, at))
}

fn tokens_at(b: &[u8], index_at: usize) -> Option<Tokens<'_>> {
    let idx = |k: usize| u16_at(b, index_at + 2 * k).map(usize::from);
    if idx(0)? != 0 {
        return None;
    }
    let mut index = [0usize; 256];
    for k in 1..256 {
        index[k] = idx(k)?;
        let step = index[k].checked_sub(index[k - 1])?;
        if !(2..=MAX_TOKEN + 1).contains(&step) {
            return None;
        }
    }
    // The table is 8-aligned and ends (after its last token's NUL)
    // where alignment puts the index.
    let last = index[255];
    let lowest = index_at.checked_sub(last + MAX_TOKEN + 8)?;
    (lowest..=index_at.checked_sub(last + 2)?)
        .filter(|t| t % 8 == 0)
        .find_map(|table| {
            let tokens: Option<Vec<&[u8]>> = (0..256)
                .map(|k| {
                    let start = table + index[k];
                    let end = if k < 255 {
                        table + index[k + 1] - 1
                    } else {
                        start + b.get(start..index_at)?.iter().position(|&c| c == 0)?
                    };
                    let token = b.get(start..end)?;
                    let ok = b.get(end) == Some(&0)
                        && !token.is_empty()
                        && token.iter().all(|c| c.is_ascii_graphic());
                    ok.then_some(token)
                })
                .collect();
            let tokens = tokens?;
            let end = table + index[255] + tokens[255].len() + 1;
            (align8(end) == index_at).then_some(Tokens { index_at, tokens })
        })
}

/// One name of `kallsyms_names` at `at`: its token indices and the offset
/// after it.
fn name_at(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let first = *b.get(at)?;
    let (len, start) = if first & 0x80 != 0 {
        let second = *b.get(at + 1)?;
        (usize::from(first & 0x7f) | usize::from(second) << 7, at + 2)
    } else {
        (usize::from(first), at + 1)
    };
    if len == 0 {
        return None;
    }
    Some((b.get(start..start + len)?, start + len))
}

fn expand(tokens: &Tokens<'_>, name: &[u8], out: &mut Vec<u8>) {
    out.clear();
    for &t in name {
        out.extend_from_slice(tokens.tokens[usize::from(t)]);
    }
}

/// Whether `s` reads as a kallsyms entry: a type letter, then a name.
fn looks_like_symbol(s: &[u8]) -> bool {
    s.len() >= 2
        && b"aAbBdDgGrRsStTuUvVwW".contains(&s[0])
        && s[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.$".contains(c))
}

/// The names table: where it starts, how many symbols, where it ends.
struct Names {
    num_syms_at: usize,
    count: u32,
    start: usize,
}

/// Finds `kallsyms_num_syms` and the names after it: the count, names
/// that decode to symbols, and markers after them that match the walk.
fn find_names(b: &[u8], tokens: &Tokens<'_>, table_at: usize) -> Option<Names> {
    let mut walks = 0;
    let mut text = Vec::new();
    let lowest = table_at.saturating_sub(NAMES_WINDOW);
    let mut at = table_at.checked_sub(8)? & !7;
    while at >= lowest {
        let candidate = (|| {
            let count = u32_at(b, at)?;
            if !(256..=MAX_SYMBOLS).contains(&count) || u32_at(b, at + 4)? != 0 {
                return None;
            }
            let mut pos = at + 8;
            for _ in 0..PROBE_NAMES {
                let (name, next) = name_at(b, pos)?;
                expand(tokens, name, &mut text);
                if !looks_like_symbol(&text) {
                    return None;
                }
                pos = next;
            }
            walks += 1;
            if walks > MAX_FULL_WALKS {
                return None;
            }
            let start = at + 8;
            let mut markers = Vec::with_capacity(count as usize / 256 + 1);
            let mut pos = start;
            for i in 0..count {
                if i % 256 == 0 {
                    markers.push(pos - start);
                }
                pos = name_at(b, pos)?.1;
                if pos > table_at {
                    return None;
                }
            }
            let markers_at = align8(pos);
            let all_match = markers
                .iter()
                .enumerate()
                .all(|(k, &m)| u32_at(b, markers_at + 4 * k).map(|v| v as usize) == Some(m));
            (all_match && markers_at + 4 * markers.len() <= table_at).then_some(Names {
                num_syms_at: at,
                count,
                start,
            })
        })();
        if candidate.is_some() {
            return candidate;
        }
        if walks > MAX_FULL_WALKS || at < 8 {
            return None;
        }
        at -= 8;
    }
    None
}

/// Decodes the table in `b` (bytes of kernel memory whose first byte is at
/// virtual address `va`), keeping the addresses of `wanted`. `text` is the
/// kernel's `_text`: the table's own `_text` must agree, which rules out
/// offsets read from the wrong place. `None` when no consistent table is
/// found.
pub fn find(b: &[u8], text: u64, wanted: &[&str]) -> Option<Symbols> {
    let (symbols, count) = decode(b, text, |name| wanted.iter().any(|w| w.as_bytes() == name))?;
    Some(Symbols {
        addresses: symbols.into_iter().collect(),
        count,
    })
}

/// Every symbol of the table in `b`, in the table's order (by address),
/// with its address; `None` as for [`find`].
pub fn all(b: &[u8], text: u64) -> Option<Vec<(String, u64)>> {
    decode(b, text, |_| true).map(|(symbols, _)| symbols)
}

/// The symbols whose names `keep` takes, with their addresses, and the
/// count of symbols in the table.
fn decode(
    b: &[u8],
    text: u64,
    mut keep: impl FnMut(&[u8]) -> bool,
) -> Option<(Vec<(String, u64)>, u32)> {
    let tokens = find_tokens(b)?;
    let table_at = tokens.index_at; // the token table lies just before
    let names = find_names(b, &tokens, table_at)?;
    let n = names.count as usize;
    // Where the offsets and their base may be: before the count (older
    // kernels), or after the token index (newer).
    let before = names
        .num_syms_at
        .checked_sub(8)
        .and_then(|base_at| Some((base_at.checked_sub(align8(4 * n))?, base_at)));
    let after = {
        let offsets_at = align8(tokens.index_at + 512);
        Some((offsets_at, align8(offsets_at + 4 * n)))
    };
    let mut names_text = Vec::new();
    // Decode every name once, remembering the index of those asked for and
    // of `_text`.
    let mut indices: Vec<(usize, String)> = Vec::new();
    let mut text_index = None;
    let mut pos = names.start;
    for i in 0..n {
        let (name, next) = name_at(b, pos)?;
        expand(&tokens, name, &mut names_text);
        let symbol = names_text.get(1..).unwrap_or_default();
        if symbol == b"_text" {
            text_index = Some(i);
        }
        if keep(symbol) {
            indices.push((i, String::from_utf8_lossy(symbol).into_owned()));
        }
        pos = next;
    }
    let text_index = text_index?;
    [before, after]
        .into_iter()
        .flatten()
        .find_map(|(offsets_at, base_at)| {
            let base = u64_at(b, base_at)?;
            let offset = |i: usize| u32_at(b, offsets_at + 4 * i).map(|v| v as i32);
            // With absolute per-CPU symbols (x86-64 until 6.15) an offset below
            // zero counts down from the base; otherwise all are unsigned.
            let absolute_percpu = offset(text_index)? < 0;
            let address = |i: usize| -> Option<u64> {
                let off = offset(i)?;
                Some(if !absolute_percpu {
                    base.wrapping_add(u64::from(off as u32))
                } else if off >= 0 {
                    off as u64
                } else {
                    base.wrapping_sub(1).wrapping_sub(off as i64 as u64)
                })
            };
            if address(text_index)? != text {
                return None;
            }
            let addresses = indices
                .iter()
                .map(|(i, name)| Some((name.clone(), address(*i)?)))
                .collect::<Option<Vec<_>>>()?;
            Some((addresses, names.count))
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Kallsyms tables in the layout of 6.1, for `symbols` (name, address)
    /// with `_text` first, each character its own token and tokens 0..
    /// the other bytes' characters.
    pub(crate) fn tables(symbols: &[(&str, u64)], offsets_after: bool) -> (Vec<u8>, usize) {
        let text = symbols[0].1;
        let mut out = vec![0x11u8; 40]; // something before
        let pad = |out: &mut Vec<u8>| out.resize(align8(out.len()), 0);
        pad(&mut out);
        let offsets: Vec<u8> = symbols
            .iter()
            .map(|(_, a)| (-1 - (a - text) as i64) as i32)
            .flat_map(|o| o.to_le_bytes())
            .collect();
        let offsets_block = |out: &mut Vec<u8>| {
            out.extend(&offsets);
            pad(out);
            out.extend((text).to_le_bytes());
            pad(out);
        };
        if !offsets_after {
            offsets_block(&mut out);
        }
        let num_syms_at = out.len();
        out.extend((symbols.len() as u32).to_le_bytes());
        pad(&mut out);
        let start = out.len();
        let mut markers = Vec::new();
        for (i, (name, _)) in symbols.iter().enumerate() {
            if i % 256 == 0 {
                markers.push((out.len() - start) as u32);
            }
            let typed = format!("T{name}");
            out.push(typed.len() as u8);
            out.extend(typed.bytes());
        }
        pad(&mut out);
        for m in markers {
            out.extend(m.to_le_bytes());
        }
        pad(&mut out);
        let mut index = Vec::new();
        let table_at = out.len();
        for t in 0..=255u8 {
            index.push((out.len() - table_at) as u16);
            // Printable characters stand for themselves; the rest are "~".
            out.push(if t.is_ascii_graphic() { t } else { b'~' });
            out.push(0);
        }
        pad(&mut out);
        for i in index {
            out.extend(i.to_le_bytes());
        }
        pad(&mut out);
        if offsets_after {
            offsets_block(&mut out);
        }
        out.extend([0x22u8; 24]);
        (out, num_syms_at)
    }

    fn sample() -> Vec<(String, u64)> {
        let text = 0xffff_ffff_8100_0000u64;
        let mut s = vec![("_text".to_string(), text)];
        for i in 0..300u64 {
            s.push((format!("sym_{i}"), text + 0x40 * (i + 1)));
        }
        s.push(("init_task".into(), text + 0x1a1_aa40));
        s
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: slow (linux has no unsafe code)
    fn decodes_both_layouts() {
        let owned = sample();
        let symbols: Vec<(&str, u64)> = owned.iter().map(|(n, a)| (n.as_str(), *a)).collect();
        for after in [false, true] {
            let (bytes, _) = tables(&symbols, after);
            let found = find(&bytes, symbols[0].1, &["init_task", "sym_299", "missing"])
                .unwrap_or_else(|| panic!("offsets after: {after}"));
            assert_eq!(found.count, symbols.len() as u32);
            assert_eq!(found.addresses.len(), 2);
            assert_eq!(found.addresses["init_task"], 0xffff_ffff_82a1_aa40);
            assert_eq!(
                found.addresses["sym_299"],
                0xffff_ffff_8100_0000 + 0x40 * 300
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri: slow (linux has no unsafe code)
    fn a_wrong_text_or_broken_markers_are_refused() {
        let owned = sample();
        let symbols: Vec<(&str, u64)> = owned.iter().map(|(n, a)| (n.as_str(), *a)).collect();
        let (bytes, num_syms_at) = tables(&symbols, false);
        assert_eq!(find(&bytes, symbols[0].1 + 0x20_0000, &["init_task"]), None);
        // One more symbol claimed than the names hold: the markers no
        // longer match the walk.
        let mut broken = bytes.clone();
        broken[num_syms_at] += 1;
        assert_eq!(find(&broken, symbols[0].1, &["init_task"]), None);
        assert_eq!(find(&[0u8; 4096], 0, &["init_task"]), None);
    }
}
