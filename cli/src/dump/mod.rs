//! `leechio dump`: physical RAM or an address space's mapped ranges to an
//! ELF core (one PT_LOAD per range) or a raw file, with a progress bar, a
//! list of failed ranges beside the file, and a valid file even when
//! interrupted.

mod elf;
mod output;
mod process;
mod report;
mod vmcoreinfo;

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::ops::RangeInclusive;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bytemuck::{Pod, Zeroable};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::numbers::{parse_number, parse_range, show_range};
use super::Failure;
use leechio::{AddressSpace, Alias, FailedRange, Memory, PageError};

/// The alignment of an ELF dump's segments (p_align).
use elf::*;
use output::*;
pub use output::{open_files, OpenFile};
use report::*;

const PAGE: u64 = 0x1000;

/// Bytes per device call while dumping.
const CHUNK: u64 = 4 << 20;

#[derive(Args)]
pub struct DumpArgs {
    /// Output file
    #[arg(long, short)]
    output: PathBuf,
    /// Page-table root (CR3): dump the address space's mapped ranges instead of RAM
    #[arg(long, value_parser = parse_number)]
    dtb: Option<u64>,
    /// Only addresses in START-END, END exclusive (physical, or virtual with
    /// --dtb); END 0x10000000000000000 reaches the last byte
    #[arg(long, value_parser = parse_range)]
    range: Option<RangeInclusive<u64>>,
    /// File format
    #[arg(long, value_enum, default_value_t = Format::Elf)]
    format: Format,
    /// A Linux process (its pid): dump its memory maps, one PT_LOAD per VMA with its permissions, read through its own page tables, with a note of its mapped files (NT_FILE)
    #[arg(long, conflicts_with = "dtb")]
    pid: Option<u32>,
    /// The same for the one user process of that name (comm, or its program's file name)
    #[arg(long, value_name = "NAME", conflicts_with_all = ["dtb", "pid"])]
    process: Option<String>,
    /// BTF of the target's kernel, for --pid, --process and the VMCOREINFO note on a kernel built without it (see `ps --btf`)
    #[arg(long, value_name = "FILE")]
    btf: Option<PathBuf>,
    /// Neither read nor write the cache of kernels found (--pid, --process, the VMCOREINFO note)
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    vmcoreinfo: vmcoreinfo::VmcoreinfoArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// ELF core file: one PT_LOAD per range (gdb, volatility-style tools)
    Elf,
    /// Raw bytes at their offset from the start; holes and failed pages as zeros
    Raw,
}

/// A range to dump: `len` bytes at address `addr` (what the file shows)
/// found at physical address `pa`.
#[derive(Clone, Copy)]
struct Piece {
    addr: u64,
    pa: u64,
    len: u64,
    /// The segment's `p_flags`.
    flags: u32,
}

pub fn progress_bar(total: u64, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes}  {binary_bytes_per_sec}  ETA {eta}",
        )
        .expect("valid template"),
    );
    bar
}

/// A file a dump writes, opened without truncating it, so a dump refused
/// after opening it leaves what was there untouched.
struct OutputFile {
    file: File,
    path: PathBuf,
    /// Whether this dump created it (and so removes it when refused).
    created: bool,
}

impl OutputFile {
    /// Opens `path` for writing, creating it if need be, keeping its content.
    fn open(path: &Path) -> Result<OutputFile, Failure> {
        let cannot = |e: std::io::Error| Failure(format!("cannot write {}: {e}", path.display()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true);
        // `create_new` first, to know whether the file is this dump's own.
        match options.clone().create_new(true).open(path) {
            Ok(file) => Ok(OutputFile {
                file,
                path: path.to_path_buf(),
                created: true,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(OutputFile {
                file: options.open(path).map_err(cannot)?,
                path: path.to_path_buf(),
                created: false,
            }),
            Err(e) => Err(cannot(e)),
        }
    }

    /// Whether the file system lets the file be `size` bytes long: grows it
    /// (sparsely) when it is shorter. A failed `ftruncate` changes nothing,
    /// so a refused size leaves an existing file as it was.
    fn check_size(&self, size: u64) -> std::io::Result<()> {
        if size > self.file.metadata()?.len() {
            self.file.set_len(size)?;
        }
        Ok(())
    }

    /// Whether `self` and `other` are one file (one device and inode).
    fn is_same_file(&self, other: &OutputFile) -> bool {
        match (self.file.metadata(), other.file.metadata()) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        }
    }

    /// Gives the file up when the dump is refused: removes it if this dump
    /// created it, leaves it untouched otherwise.
    fn abandon(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Empties the file for the dump: past here its old content is gone.
    fn truncate(self) -> Result<File, Failure> {
        self.file
            .set_len(0)
            .map_err(|e| Failure(format!("cannot write {}: {e}", self.path.display())))?;
        Ok(self.file)
    }
}

/// Writes the dump of `args` from `mem`; `device` and `sources` (the
/// files the device holds open) are what the output must not be.
pub fn run(
    mem: &Memory,
    device: &str,
    sources: &[OpenFile],
    args: &DumpArgs,
    json_output: bool,
) -> Result<ExitCode, Failure> {
    refuse_own_source(device, sources, &args.output)?;
    refuse_non_file(&args.output)?;
    // A process is read through its own address space; anything else by
    // physical address.
    let (pieces, space, note) = match process::plan(mem, args)? {
        Some(p) if p.pieces.is_empty() => {
            return Err(Failure(format!(
                "nothing to dump: {} maps no memory{}",
                p.name,
                if args.range.is_some() {
                    " in that range"
                } else {
                    ""
                }
            )))
        }
        Some(p) => (p.pieces, Some(p.space), p.note),
        None => (plan(mem, args)?, None, Vec::new()),
    };
    let virtual_space = args.dtb.is_some() || space.is_some();
    if pieces.is_empty() {
        return Err(Failure(match (args.dtb, &args.range) {
            (_, Some(_)) => "nothing to dump: no memory in that range".into(),
            (Some(dtb), None) => {
                format!("nothing to dump: the address space of --dtb {dtb:#x} maps no memory")
            }
            (None, None) => "nothing to dump: the device has no memory".into(),
        }));
    }
    if args.format == Format::Raw && virtual_space && args.range.is_none() {
        return Err(Failure(
            "--format raw of an address space needs --range (the space spans 2^64 bytes)".into(),
        ));
    }
    // Past PN_XNUM program headers the count goes in a section header's
    // 32-bit sh_info.
    if args.format == Format::Elf && u32::try_from(pieces.len()).is_err() {
        return Err(Failure(format!(
            "{} ranges are more than an ELF file can count (2^32 - 1); narrow it with --range",
            pieces.len()
        )));
    }
    // Where each piece goes in the file, and how long the file is; a size
    // no file can have is refused before anything is created.
    let note = match args.format {
        Format::Elf if space.is_none() => vmcoreinfo::note(mem, args),
        Format::Elf => note,
        Format::Raw => Vec::new(),
    };
    let (offsets, size) = layout(&pieces, args.format, args.range.as_ref(), note.len() as u64)
        .ok_or_else(|| too_large(&args.output, None))?;
    // The kernel's limit for any file (`off_t`).
    if size > i64::MAX as u64 {
        return Err(too_large(&args.output, Some(size)));
    }

    // From the file's creation on, a termination signal (Ctrl-C, SIGTERM,
    // …) stops the dump after the chunk in progress, and the file is
    // finished with headers for what was read; a second one while they are
    // written is ignored: they are short.
    let catching = super::signals::catch_termination(None)?;
    let out = OutputFile::open(&args.output)?;
    // The `.failed` list is opened now too: a place it cannot be written
    // is found before a byte is read, not after the whole dump.
    let sidecar_path = failed_list_path(&args.output);
    let sidecar = match OutputFile::open(&sidecar_path) {
        Ok(sidecar) => sidecar,
        Err(e) => {
            out.abandon();
            return Err(e);
        }
    };
    // A `.failed` list that is a link to the output would overwrite the
    // dump's headers with the list.
    if out.is_same_file(&sidecar) {
        let e = Failure(format!(
            "refusing to write {}: it is {} itself (a link); the list of failed ranges \
             would overwrite the dump (remove the link or choose another -o)",
            sidecar_path.display(),
            args.output.display()
        ));
        sidecar.abandon();
        out.abandon();
        return Err(e);
    }
    // Sized (sparsely), so a file system that cannot hold it says so now,
    // not after the whole dump was read; a refusal leaves a file that was
    // there as it was.
    if let Err(e) = out.check_size(size) {
        out.abandon();
        sidecar.abandon();
        return Err(Failure(format!(
            "cannot make {} {size:#x} bytes ({}) long: {e}; narrow --range{}",
            args.output.display(),
            human_size(size),
            if args.format == Format::Raw {
                " or use --format elf (which holds only the mapped ranges)"
            } else {
                ""
            }
        )));
    }
    // Only now is the old content dropped. Left empty, the file grows as it
    // is written: its size shows how far the dump got, and the holes of a
    // raw dump read as zeros, not as what the file held before.
    let mut file = out.truncate()?;
    let sidecar = sidecar.truncate()?;
    // A dump leaves a valid file or none: one that cannot be made valid
    // (no room for its headers, or not a byte of memory written before a
    // write failed) is removed with its `.failed` list, whose old content
    // is gone already.
    let remove_both = || {
        let _ = std::fs::remove_file(&args.output);
        let _ = std::fs::remove_file(&sidecar_path);
    };
    if args.format == Format::Elf {
        // The headers' place is written (as zeros) now, so that a disk that
        // fills up midway still has room for the headers at the end: they
        // overwrite blocks the file already holds.
        let headers = vec![0; headers_len(pieces.len() + usize::from(!note.is_empty())) as usize];
        let written = file
            .write_all_at(&headers, 0)
            .and_then(|()| file.write_all_at(&note, note_offset(pieces.len(), note.len() as u64)));
        if let Err(e) = written {
            remove_both();
            return Err(Failure(format!(
                "writing {}: {e}; nothing was dumped, and the file was removed (a dump leaves a valid file or none)",
                args.output.display()
            )));
        }
    }

    let total: u64 = pieces.iter().map(|p| p.len).sum();
    let bar = progress_bar(total, !json_output);

    let mut written = vec![0u64; pieces.len()];
    // (start, length, reason): a range's end may be 2^64.
    let mut failed: Vec<(u64, u64, String)> = Vec::new();
    // A write that fails (a full disk) ends the dump as Ctrl-C does: the
    // file keeps what was written, with headers for it.
    let mut write_error = None;
    // The device is gone (its QEMU exited, it stopped answering, its
    // connection closed): nothing more can be read.
    let mut gone = None;
    let mut buf = vec![0u8; CHUNK as usize];
    'pieces: for (i, p) in pieces.iter().enumerate() {
        let mut done = 0;
        while done < p.len {
            if super::signals::arrived().is_some() {
                break 'pieces;
            }
            let n = (p.len - done).min(CHUNK) as usize;
            let chunk = &mut buf[..n];
            let failures = match &space {
                Some(space) => match mem.block_on(space.read(p.addr + done, chunk)) {
                    Ok(()) => Vec::new(),
                    Err(e) => e.failed,
                },
                None => mem
                    .read_now([(p.pa + done, &mut *chunk)])
                    .failures(0)
                    .copied()
                    .collect(),
            };
            // Only the bytes read are written: failed ones stay holes of
            // the file, which read as zeros and take no disk space (a
            // wrong --dtb can map gigabytes past the end of RAM).
            let at = offsets[i] + done;
            let mut result = Ok(());
            let mut from = 0;
            for (a, b) in failures
                .iter()
                .map(|f| (f.offset, f.offset + f.len))
                .chain([(n, n)])
            {
                if result.is_ok() && from < a {
                    result = file.write_all_at(&chunk[from..a], at + from as u64);
                }
                from = b;
            }
            let mut chunk_failed = Vec::new();
            for f in &failures {
                let start = p.addr + done + f.offset as u64;
                chunk_failed.push((start, f.len as u64, f.reason.to_string()));
                if f.reason.is_device_lost() {
                    gone = Some(f.reason);
                }
            }
            if let Err(e) = result {
                write_error = Some(e);
                break 'pieces;
            }
            // Listed only once in the file: the list names ranges it holds.
            failed.append(&mut chunk_failed);
            done += n as u64;
            written[i] = done;
            bar.inc(n as u64);
            if gone.is_some() {
                break 'pieces;
            }
        }
    }
    bar.finish_and_clear();
    let interrupted = super::signals::arrived().is_some();
    // What went wrong finishing the file, each said in the one error line.
    let mut problems = Vec::new();
    if let Some(reason) = gone {
        let why = match mem.backend().lost() {
            Some(why) => why,
            None if reason == leechio::PageError::TargetGone => {
                "the target went away during the dump (its QEMU exited?)".to_string()
            }
            None => reason.to_string(),
        };
        problems.push(format!(
            "{why}; the dump stopped there, and the file holds what was read until then"
        ));
    }
    let dumped: u64 = written.iter().sum();
    // Whether the file is given up (see `remove_both`).
    let mut removed = false;
    if let Some(e) = &write_error {
        removed = dumped == 0;
        problems.push(format!(
            "writing {}: {e}; the dump stopped there, and {}",
            args.output.display(),
            if removed {
                "as nothing was written, the file was removed (a dump leaves a valid file or none)"
            } else {
                "the file holds what was written until then"
            }
        ));
    }

    // Holes at the end of a raw dump of a range are zeros too; a dump
    // that stopped early ends where what was written ends.
    let end = if interrupted || gone.is_some() || write_error.is_some() {
        offsets
            .iter()
            .zip(&written)
            .filter(|(_, &w)| w > 0)
            .map(|(o, w)| o + w)
            .max()
            .unwrap_or(0)
    } else {
        size
    };
    if !removed {
        if let Err(e) = file.set_len(end) {
            problems.push(format!(
                "setting the length of {} to {end:#x}: {e}",
                args.output.display()
            ));
        }
    }
    if args.format == Format::Elf && !removed {
        if let Err(e) =
            write_elf_headers(&mut file, &pieces, &offsets, &written, virtual_space, &note)
        {
            removed = true;
            problems.push(format!(
                "writing the ELF headers of {}: {e}; the file was removed, as it would not be \
                 a valid ELF file (a dump leaves a valid file or none)",
                args.output.display()
            ));
        }
    }
    if removed {
        remove_both();
    } else if let Err(e) = write_failed_list(&sidecar, &failed) {
        problems.push(format!("writing {}: {e}", sidecar_path.display()));
    }
    // The file is finished: from here a signal ends the program at once.
    drop(catching);

    // Bytes in the file's ranges: those read, and those that failed
    // (zeros in the file); "bytes" in text and JSON alike is those read.
    let failed_bytes: u64 = failed.iter().map(|(_, len, _)| len).sum();
    let read = dumped.saturating_sub(failed_bytes);
    if json_output {
        outln!(
            "{}",
            json!({"output": args.output.display().to_string(), "ranges": pieces.len(), "bytes": read,
                "failed_bytes": failed_bytes, "failed_ranges": failed.len(), "interrupted": interrupted,
                "failed_list": sidecar_path.display().to_string(),
                "error": (!problems.is_empty()).then(|| problems.join("; "))})
        );
    } else {
        outln!(
            "{}: {} bytes in {} ranges, {} bytes failed in {} ranges{}",
            args.output.display(),
            read,
            pieces.len(),
            failed_bytes,
            failed.len(),
            if failed.is_empty() || removed {
                String::new()
            } else {
                format!(" (listed in {})", sidecar_path.display())
            }
        );
        if interrupted && problems.is_empty() {
            outln!("interrupted: the file holds what was read until then");
        }
    }
    if !problems.is_empty() {
        errln!("leechio: {}", problems.join("; "));
        return Ok(ExitCode::FAILURE);
    }
    if let Some(sig) = super::signals::arrived() {
        return Ok(super::signals::exit_code(sig));
    }
    // Holes are normal, but a dump with no byte of memory in it is a
    // failure (a dead device, a wrong --dtb), not a result.
    if dumped > 0 && read == 0 {
        errln!(
            "leechio: nothing could be read: all {dumped} bytes failed (listed in {})",
            sidecar_path.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Where each piece goes in the file, and the file's length; `None` when
/// that is more than 2^64 bytes.
fn layout(
    pieces: &[Piece],
    format: Format,
    range: Option<&RangeInclusive<u64>>,
    note_len: u64,
) -> Option<(Vec<u64>, u64)> {
    let base = range.map_or(0, |r| *r.start());
    let mut offsets = Vec::with_capacity(pieces.len());
    let mut at = note_offset(pieces.len(), note_len) + note_len;
    for p in pieces {
        let offset = match format {
            // The first place from `at` with p_offset ≡ p_vaddr (mod
            // p_align), which the ELF spec requires of a PT_LOAD. Kept at
            // p_align 0x1000 (not 1, which any offset satisfies) so that
            // readers that map segments page by page (gdb via bfd, mmap-based
            // forensic tools) can; it costs under a page of padding per range.
            Format::Elf => {
                let o = (at - at % PAGE).checked_add(p.addr % PAGE)?;
                if o < at {
                    o.checked_add(PAGE)?
                } else {
                    o
                }
            }
            Format::Raw => p.addr - base,
        };
        offsets.push(offset);
        at = offset.checked_add(p.len)?;
    }
    let size = match (format, range) {
        // Holes at the end of a raw dump of a range are zeros too.
        (Format::Raw, Some(r)) => (r.end() - r.start()).checked_add(1)?,
        _ => at,
    };
    Some((offsets, size))
}

/// The ranges to dump, in address order.
fn plan(mem: &Memory, args: &DumpArgs) -> Result<Vec<Piece>, Failure> {
    let within = |start: u64, end: u64| -> Option<(u64, u64)> {
        let (s, e) = match &args.range {
            // (A physical range's end is below 2^64.)
            Some(r) => (start.max(*r.start()), end.min(r.end().saturating_add(1))),
            None => (start, end),
        };
        (s < e).then_some((s, e))
    };
    match args.dtb {
        None => {
            let map = mem.backend().memory_map();
            if let Some(r) = &args.range {
                if *r.start() >= map.end() {
                    return Err(Failure(format!(
                        "range {} starts past the end of memory ({:#x})",
                        show_range(r),
                        map.end()
                    )));
                }
            }
            Ok(map
                .ranges()
                .iter()
                .filter_map(|r| within(r.start, r.end()))
                .map(|(s, e)| Piece {
                    addr: s,
                    pa: s,
                    len: e - s,
                    flags: PF_R | PF_W,
                })
                .collect())
        }
        Some(dtb) => {
            let space = AddressSpace::new(mem.clone(), dtb);
            // A root that cannot be read makes every range unreadable; that
            // is the one thing to say, not "no memory in that range".
            let mut entry = [0u8; 8];
            if let Err(e) = mem.block_on(mem.read(space.dtb(), &mut entry)) {
                let why = e.failed.first().map(|f| f.reason.to_string());
                let end = mem.backend().memory_map().end();
                return Err(Failure(format!(
                    "the page-table root {:#x} (--dtb) is unreadable: {}{}; nothing to dump",
                    space.dtb(),
                    why.as_deref().unwrap_or("read failed"),
                    if space.dtb() >= end {
                        format!(" (memory ends at {end:#x})")
                    } else {
                        String::new()
                    }
                )));
            }
            let range = args.range.clone().unwrap_or(0..=u64::MAX);
            let found = mem.block_on(space.mappings(range));
            report_failed(&found.failed);
            report_aliases(&found.aliases);
            Ok(found
                .mappings
                .iter()
                .map(|m| Piece {
                    addr: m.va,
                    pa: m.pa,
                    len: m.size,
                    flags: PF_R | PF_W,
                })
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `readelf -h -l -W` of `path`: its output, and that it had nothing
    /// to complain about.
    fn readelf(path: &Path) -> String {
        let o = std::process::Command::new("readelf")
            .args(["-h", "-l", "-W"])
            .arg(path)
            .output()
            .expect("run readelf");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success() && err.is_empty(), "{err}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Writes the ELF dump layout and headers of `pieces` (all fully
    /// written) to a sparse file and returns readelf's view of it.
    fn headers_of(pieces: &[Piece]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.elf");
        let mut file = File::create(&path).unwrap();
        let (offsets, size) = layout(pieces, Format::Elf, None, 0).unwrap();
        file.set_len(size).unwrap();
        let written: Vec<u64> = pieces.iter().map(|p| p.len).collect();
        write_elf_headers(&mut file, pieces, &offsets, &written, false, &[]).unwrap();
        readelf(&path)
    }

    #[test]
    fn more_ranges_than_e_phnum_holds_use_extended_numbering() {
        let n = PN_XNUM as u64 + 2;
        let pieces: Vec<Piece> = (0..n)
            .map(|i| Piece {
                addr: i * 0x2000,
                pa: i * 0x2000,
                len: 0x1000,
                flags: PF_R,
            })
            .collect();
        let out = headers_of(&pieces);
        // readelf reads the count from the section header.
        assert!(
            out.contains(&format!("Number of program headers:         65535 ({n})")),
            "{}",
            &out[..2000]
        );
        let loads: Vec<&str> = out
            .lines()
            .filter(|l| l.trim_start().starts_with("LOAD"))
            .collect();
        assert_eq!(loads.len() as u64, n);
        let last = loads.last().unwrap();
        assert!(
            last.contains(&format!("0x{:016x}", (n - 1) * 0x2000)),
            "{last}"
        );

        // One fewer than PN_XNUM still fits in e_phnum: no section header.
        let out = headers_of(&pieces[..PN_XNUM as usize - 1]);
        assert!(
            out.contains("Number of program headers:         65534\n"),
            "{}",
            &out[..2000]
        );
        assert!(
            out.contains("Number of section headers:         0"),
            "{}",
            &out[..2000]
        );
    }

    #[test]
    fn segments_sit_at_offsets_congruent_to_their_addresses() {
        let out = headers_of(&[
            Piece {
                addr: 0x9c001,
                pa: 0x9c001,
                len: 0x2002,
                flags: PF_R,
            },
            Piece {
                addr: 0xa0ff8,
                pa: 0xa0ff8,
                len: 0x10,
                flags: PF_R,
            },
            Piece {
                addr: 0xb1000,
                pa: 0xb1000,
                len: 0x1000,
                flags: PF_R,
            },
        ]);
        let offsets: Vec<&str> = out
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("LOAD"))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(offsets, ["0x001001", "0x003ff8", "0x005000"], "{out}");
    }
}
