//! ELF cores as forensics and debugging tools read them: binutils'
//! `readelf` and gdb, run on the files a dump writes.

use std::path::Path;
use std::process::Command;

/// `PT_NOTE`.
const PT_NOTE: u32 = 4;

/// The notes of the ELF file `elf` as (owner without its NUL, type,
/// description), read by this test code alone (no tool's reading).
pub fn notes(elf: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    let (phoff, phnum) = (u64_at(0x20), u16_at(0x38));
    let mut found = Vec::new();
    for ph in (0..phnum).map(|i| phoff + i * 56) {
        if u32_at(ph) != PT_NOTE {
            continue;
        }
        let (mut at, end) = (u64_at(ph + 8), u64_at(ph + 8) + u64_at(ph + 32));
        while at < end {
            let (namesz, descsz, kind) =
                (u32_at(at) as usize, u32_at(at + 4) as usize, u32_at(at + 8));
            let name = &elf[at + 12..at + 12 + namesz];
            let desc_at = at + 12 + namesz.next_multiple_of(4);
            found.push((
                String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name)).into_owned(),
                kind,
                elf[desc_at..desc_at + descsz].to_vec(),
            ));
            at = desc_at + descsz.next_multiple_of(4);
        }
    }
    found
}

/// `readelf -h -l -n -W` of `path`: its output, once it is shown to have
/// had nothing to complain about (no warning, no error).
pub fn readelf_clean(path: &Path) -> String {
    let o = Command::new("readelf")
        .args(["-h", "-l", "-n", "-W"])
        .arg(path)
        .output()
        .expect("run readelf (binutils; make setup installs it)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.is_empty(),
        "readelf {}: {err}",
        path.display()
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The `p_flags` of each `PT_LOAD` of the ELF file `elf`, in order:
/// `"R"`, `"RW"`, `"R E"`, … as readelf shows them.
pub fn load_flags(elf: &[u8]) -> Vec<String> {
    let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes([elf[56], elf[57]]) as usize;
    (0..phnum)
        .map(|i| &elf[phoff + i * 56..phoff + (i + 1) * 56])
        .filter(|h| u32::from_le_bytes(h[..4].try_into().unwrap()) == 1)
        .map(|h| {
            let f = u32::from_le_bytes(h[4..8].try_into().unwrap());
            let mut s = String::new();
            s.push(if f & 4 != 0 { 'R' } else { ' ' });
            s.push(if f & 2 != 0 { 'W' } else { ' ' });
            s.push(if f & 1 != 0 { 'E' } else { ' ' });
            s.trim_end().to_string()
        })
        .collect()
}

/// What gdb reads at virtual address `va` of the core file `core`, `n`
/// bytes; `None` where gdb says it cannot access that memory.
pub fn gdb_read(core: &Path, va: u64, n: usize) -> Option<Vec<u8>> {
    gdb_reads(core, &[(va, n)]).pop().unwrap()
}

/// [`gdb_read`] of each `(va, n)`, in one run of gdb.
pub fn gdb_reads(core: &Path, reads: &[(u64, usize)]) -> Vec<Option<Vec<u8>>> {
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx", "-q"]).arg("-c").arg(core);
    for (i, &(va, n)) in reads.iter().enumerate() {
        cmd.args([
            "-ex",
            &format!("echo @read {i}\\n"),
            "-ex",
            &format!("x/{n}xb {va:#x}"),
        ]);
    }
    let o = cmd.output().expect("run gdb (make setup installs it)");
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    let mut out: Vec<Option<Vec<u8>>> = vec![None; reads.len()];
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if let Some(i) = line.strip_prefix("@read ") {
            current = i.trim().parse().ok();
            if let Some(i) = current {
                out[i] = Some(Vec::new());
            }
            continue;
        }
        let Some(i) = current else { continue };
        if line.contains("Cannot access memory") {
            out[i] = None;
            current = None;
            continue;
        }
        // "0xffff888000001000:\t0x00\t0x1f…" (with `<symbol+n>` before the
        // colon when gdb knows one).
        let Some((_, bytes)) = line.split_once(":\t") else {
            continue;
        };
        if let Some(v) = out[i].as_mut() {
            v.extend(bytes.split_whitespace().map(|b| {
                u8::from_str_radix(b.trim_start_matches("0x"), 16)
                    .unwrap_or_else(|_| panic!("gdb: {line:?}"))
            }));
        }
    }
    for (i, (v, &(va, n))) in out.iter().zip(reads).enumerate() {
        if let Some(v) = v {
            assert_eq!(v.len(), n, "gdb read {i} at {va:#x}: {text}");
        }
    }
    out
}
