//! `leechio dump`: physical RAM or an address space's mapped ranges to an
//! ELF core (one PT_LOAD per range) or a raw file, with a progress bar, a
//! list of failed ranges beside the file, and a valid file even when
//! interrupted.

mod elf;
mod layout;
mod output;
mod plan;
mod process;
mod read;
mod report;
mod vmcoreinfo;

use std::fs::File;
use std::io::Write;
use std::ops::RangeInclusive;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::device::open;
use super::numbers::{parse_number, parse_range};
use super::{Cli, Failure};
use leechio::{AddressSpace, Alias, FailedRange, Memory, PageError};

use elf::*;
use layout::Piece;
use output::*;
pub use output::{open_files, OpenFile};
use report::*;

/// The alignment of an ELF dump's segments (p_align).
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

/// `leechio dump`: opens the device and writes the dump of `args`.
pub fn dump(cli: &Cli, args: &DumpArgs) -> Result<ExitCode, Failure> {
    // The files LeechCore holds open are the device's own (its image,
    // whatever the device string's syntax): the dump must not write over
    // them.
    let before = open_files();
    let mem = open(cli)?;
    let mut sources = open_files();
    sources.retain(|f| !before.contains(f));
    let device = cli.device.as_deref().unwrap_or_default();
    run(&mem, device, &sources, args, cli.json)
}

/// Writes the dump of `args` from `mem`; `device` and `sources` (the
/// files the device holds open) are what the output must not be.
fn run(
    mem: &Memory,
    device: &str,
    sources: &[OpenFile],
    args: &DumpArgs,
    json_output: bool,
) -> Result<ExitCode, Failure> {
    refuse_own_source(device, sources, &args.output)?;
    refuse_non_file(&args.output)?;
    // What to read, by physical address: a process's memory as its own
    // page tables map it inside its VMAs; else RAM, or what --dtb's map.
    let (pieces, mut process) = match process::plan(mem, args)? {
        Some(p) if p.pieces.is_empty() => return Err(p.nothing_in(args.range.is_some())),
        Some(mut p) => (std::mem::take(&mut p.pieces), Some(p)),
        None => (plan::plan(mem, args)?, None),
    };
    let virtual_space = args.dtb.is_some() || process.is_some();
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
    // Where each piece goes in the file, and how long the file is; a size
    // no file can have is refused before anything is created.
    let (note, direct_map) = match args.format {
        Format::Elf if process.is_none() => {
            let kernel = vmcoreinfo::note(mem, args);
            (
                kernel.note,
                kernel.direct_map.filter(|_| args.dtb.is_none()),
            )
        }
        Format::Elf => (
            process
                .as_mut()
                .map(|p| std::mem::take(&mut p.note))
                .unwrap_or_default(),
            None,
        ),
        Format::Raw => (Vec::new(), None),
    };
    let layout = match (args.format, &args.range) {
        (Format::Elf, _) => layout::elf(pieces, note.len() as u64),
        // Holes at the end of a raw dump of a range are zeros too.
        (Format::Raw, Some(r)) => (r.end() - r.start())
            .checked_add(1)
            .map(|end| layout::raw(&pieces, *r.start(), end)),
        (Format::Raw, None) => {
            let last = pieces.last().expect("pieces");
            Some(layout::raw(&pieces, 0, last.addr + last.len))
        }
    }
    .ok_or_else(|| too_large(&args.output, None))?;
    let size = layout.size;
    // The kernel's limit for any file (`off_t`).
    if size > i64::MAX as u64 {
        return Err(too_large(&args.output, Some(size)));
    }
    warn_if_much_larger_than_ram(mem, &layout, &args.output);

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
        // The headers' room is written (as zeros) now, so that a disk that
        // fills up midway still has room for the headers at the end: they
        // overwrite blocks the file already holds.
        let written = write_zeros(&file, layout.note_offset)
            .and_then(|()| file.write_all_at(&note, layout.note_offset));
        if let Err(e) = written {
            remove_both();
            return Err(Failure(format!(
                "writing {}: {e}; nothing was dumped, and the file was removed (a dump leaves a valid file or none)",
                args.output.display()
            )));
        }
    }

    let bar = progress_bar(layout.data_bytes(), !json_output);
    let outcome = read::fill(mem, &layout.extents, &file, &bar);
    bar.finish_and_clear();
    let interrupted = super::signals::arrived().is_some();
    // What went wrong finishing the file, each said in the one error line.
    let mut problems = Vec::new();
    if let Some(reason) = outcome.gone {
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
    let dumped = outcome.written_bytes();
    // Whether the file is given up (see `remove_both`).
    let mut removed = false;
    if let Some(e) = &outcome.write_error {
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

    // A dump that stopped early ends where what was written ends.
    let stopped = interrupted || outcome.gone.is_some() || outcome.write_error.is_some();
    let end = if stopped {
        outcome
            .written
            .iter()
            .map(|&(o, l)| o + l)
            .max()
            .unwrap_or(0)
            .max(match args.format {
                Format::Elf => layout.note_offset + note.len() as u64,
                Format::Raw => 0,
            })
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
    // No segment shows a byte that was not read: each is cut to what was.
    let read = outcome.read_ranges();
    let segments = layout::cut_to_read(&layout.segments, &read);
    let failed = outcome.failed_in(&layout.segments);
    let left_out = process.as_ref().map_or(&[][..], |p| &p.left_out[..]);
    let listed = listed_ranges(&failed, left_out);
    if args.format == Format::Elf && !removed {
        match write_elf_headers(
            &mut file,
            &segments,
            layout.note_offset,
            note.len() as u64,
            layout.header_slots,
            end,
            direct_map,
        ) {
            Ok(HeadersAt::Start) => {}
            Ok(HeadersAt::End) => errln!(
                "leechio: warning: {} segments (cut by failed ranges) are more than the room \
                 kept for their headers; they are at the end of {}, where readelf and gdb \
                 find them but crash does not",
                segments.len(),
                args.output.display()
            ),
            Err(e) => {
                removed = true;
                problems.push(format!(
                    "writing the ELF headers of {}: {e}; the file was removed, as it would not be \
                     a valid ELF file (a dump leaves a valid file or none)",
                    args.output.display()
                ));
            }
        }
        let headers = segments.len() + usize::from(!note.is_empty());
        if !removed && headers >= PN_XNUM as usize {
            errln!(
                "leechio: warning: {} has {headers} program headers: past 65534 their count \
                 is in a section header (ELF extended numbering), which gdb and readelf read \
                 but Volatility 3 does not (it would see no memory); narrow it with --range",
                args.output.display()
            );
        }
    }
    if removed {
        remove_both();
    } else if let Err(e) = write_failed_list(&sidecar, &listed) {
        problems.push(format!("writing {}: {e}", sidecar_path.display()));
    }
    // The file is finished: from here a signal ends the program at once.
    drop(catching);

    // Bytes of memory read into the file, and bytes that failed (holes of
    // the file that no segment shows).
    let read_bytes: u64 = read.iter().map(|&(_, l)| l).sum();
    let failed_bytes = outcome.failed_bytes();
    let ranges = match args.format {
        Format::Elf => segments.len(),
        Format::Raw => layout.segments.len(),
    };
    let left_out_bytes = process
        .as_ref()
        .map(|p| process::LeftOutBytes::of(&p.left_out));
    if json_output {
        outln!(
            "{}",
            json!({"output": args.output.display().to_string(), "ranges": ranges, "bytes": read_bytes,
                "failed_bytes": failed_bytes, "failed_ranges": failed.len(), "interrupted": interrupted,
                "failed_list": sidecar_path.display().to_string(),
                "left_out": left_out_bytes.as_ref().map(|l| json!({"not_mapped": l.not_mapped,
                    "unreadable_tables": l.unreadable_tables, "shared_tables": l.shared_tables,
                    "not_ram": l.not_ram, "ranges": left_out.len()})),
                "shared_segments": layout.shared_segments, "shared_bytes": layout.shared_bytes,
                "error": (!problems.is_empty()).then(|| problems.join("; "))})
        );
    } else {
        outln!(
            "{}: {} bytes in {} {}, {} bytes failed in {} range{}{}",
            args.output.display(),
            read_bytes,
            ranges,
            match (args.format, ranges) {
                (Format::Elf, 1) => "segment",
                (Format::Elf, _) => "segments",
                (Format::Raw, 1) => "range",
                (Format::Raw, _) => "ranges",
            },
            failed_bytes,
            failed.len(),
            if failed.len() == 1 { "" } else { "s" },
            if failed.is_empty() || removed {
                String::new()
            } else {
                format!(" (listed in {})", sidecar_path.display())
            }
        );
        let listed_in = (!removed).then_some(sidecar_path.as_path());
        if let Some(line) = left_out_and_shared(left_out_bytes.as_ref(), &layout, listed_in) {
            outln!("{line}");
        }
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
    if dumped > 0 && read_bytes == 0 {
        errln!(
            "leechio: nothing could be read: all {dumped} bytes failed (listed in {})",
            sidecar_path.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// How many times the RAM behind it a dump may hold before it is said.
const LARGER_THAN_RAM: u64 = 2;

/// Says so when the memory a dump reads is much more than the target's
/// RAM: an address space mapping memory past it (device memory, or a
/// wrong --dtb), or a raw dump of a sparse range.
fn warn_if_much_larger_than_ram(mem: &Memory, layout: &layout::Layout, output: &Path) {
    let ram: u64 = mem
        .backend()
        .memory_map()
        .ranges()
        .iter()
        .map(|r| r.size)
        .sum();
    let (data, file) = (layout.data_bytes(), layout.size);
    let most = data.max(file);
    if ram > 0 && most / LARGER_THAN_RAM > ram {
        errln!(
            "leechio: warning: {} will be {} for {} of RAM: the range holds memory that is \
             not RAM or holes (narrow it with --range; an ELF dump holds only what is mapped)",
            output.display(),
            human_size(most),
            human_size(ram)
        );
    }
}
