//! `leechio cache`: the files a Linux target's page cache holds (`ls`),
//! and the cached bytes of one (`cat`), deleted files still open among
//! them, read from kernel memory with no profile.

use std::fs::File;
use std::io::{self, IsTerminal, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use leechio::linux::{CacheFailure, CachedFile, FileContents, FileQuery};
use serde_json::json;

use crate::device::open;
use crate::numbers::hex;
use crate::output::escape;
use crate::processes::KernelArgs;
use crate::{Cli, Failure};

/// Bytes of a page.
const PAGE: u64 = 4096;
/// The exit code of a `cat` that wrote the file with pages missing.
const PARTIAL: u8 = 3;

/// `leechio cache`.
#[derive(clap::Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(clap::Subcommand, Debug)]
enum CacheCommand {
    /// The regular files with pages in the cache: device, inode, size, cached pages, links, file system, path (a file unlinked but still open ends in " (deleted)")
    Ls {
        #[command(flatten)]
        kernel: KernelArgs,
    },
    /// The cached bytes of a file, by path (as `cache ls` shows it) or inode, to a pipe or -o FILE (not a terminal); a page not cached is written as zeros (a hole with -o) and named on stderr. Exit 3 when pages were missing
    Cat {
        /// The file's path, as `leechio cache ls` shows it
        #[arg(required_unless_present = "inode", conflicts_with = "inode")]
        path: Option<String>,
        /// The file's inode number instead
        #[arg(long)]
        inode: Option<u64>,
        /// The file system's device, MAJOR:MINOR, when the inode number is on several
        #[arg(long, value_name = "MAJOR:MINOR", value_parser = parse_device, requires = "inode")]
        dev: Option<u32>,
        /// Write the bytes to this file (a new or regular file) instead of stdout; needed with --json
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        kernel: KernelArgs,
    },
}

/// `MAJOR:MINOR` as the kernel keeps a device (`MKDEV`).
fn parse_device(text: &str) -> Result<u32, String> {
    let (major, minor) = text.split_once(':').ok_or("not MAJOR:MINOR")?;
    let major: u32 = major.parse().map_err(|_| "the major number is no number")?;
    let minor: u32 = minor.parse().map_err(|_| "the minor number is no number")?;
    if major >= 1 << 12 || minor >= 1 << 20 {
        return Err("past the kernel's 12-bit major and 20-bit minor numbers".into());
    }
    Ok(major << 20 | minor)
}

/// A device as `MAJOR:MINOR`.
fn device(d: u32) -> String {
    format!("{}:{}", d >> 20, d & 0xf_ffff)
}

/// Runs `leechio cache ls` or `cat`.
pub fn cache(cli: &Cli, args: &CacheArgs) -> Result<ExitCode, Failure> {
    match &args.command {
        CacheCommand::Ls { kernel } => list(cli, kernel),
        CacheCommand::Cat {
            path,
            inode,
            dev,
            output,
            kernel,
        } => {
            let query = match (path, inode) {
                (Some(path), _) => FileQuery::Path(path.clone()),
                (None, Some(number)) => FileQuery::Inode {
                    number: *number,
                    device: *dev,
                },
                (None, None) => return Err(Failure("give a path or --inode".into())),
            };
            if output.is_none() && io::stdout().is_terminal() {
                return Err(Failure(
                    "the file's bytes would go to a terminal (which their escape sequences could drive): give -o FILE or a pipe".into(),
                ));
            }
            if cli.json && output.is_none() {
                return Err(Failure(
                    "--json prints what was read on stdout: give -o FILE for the bytes".into(),
                ));
            }
            cat(cli, kernel, &query, output.as_ref())
        }
    }
}

/// Lists the cached files: a table, or one JSON object a line. What could
/// not be read goes to stderr, and the exit code is then 1.
fn list(cli: &Cli, kernel: &KernelArgs) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = kernel.find(&mem)?;
    let found = kernel.cached_files();
    if !cli.json {
        outln!(
            "{:<7} {:>10} {:>12} {:>8} {:>5} {:<10} PATH",
            "DEVICE",
            "INODE",
            "SIZE",
            "CACHED",
            "LINKS",
            "FS"
        );
    }
    for f in &found.files {
        match cli.json {
            true => outln!("{}", file_json(f)),
            false => outln!(
                "{:<7} {:>10} {:>12} {:>8} {:>5} {:<10} {}",
                device(f.device),
                f.inode,
                f.size,
                f.cached_pages,
                f.links,
                escape(f.file_system.as_deref().unwrap_or("?")),
                match &f.path {
                    Ok(path) => escape(path).into_owned(),
                    Err(_) => "?".into(),
                }
            ),
        }
    }
    for f in &found.files {
        if let Err(why) = &f.path {
            errln!(
                "leechio: inode {} on {}: path: {}",
                f.inode,
                device(f.device),
                escape(why)
            );
        }
    }
    report(&found.failed);
    Ok(match found.failed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// The JSON object of a file.
fn file_json(f: &CachedFile) -> serde_json::Value {
    json!({
        "path": f.path.as_ref().ok(), "error": f.path.as_ref().err(),
        "inode": f.inode, "device": device(f.device), "file_system": f.file_system,
        "size": f.size, "cached_pages": f.cached_pages, "links": f.links,
        "deleted": f.links == 0, "open_by": f.open_by,
        "inode_address": hex(f.address), "mapping": hex(f.mapping),
    })
}

fn report(failed: &[CacheFailure]) {
    for f in failed {
        errln!("leechio: cache: {}", escape(&f.to_string()));
    }
}

/// Writes the file's cached bytes; names the pages missing on stderr
/// (and in the JSON object, with --json).
fn cat(
    cli: &Cli,
    kernel: &KernelArgs,
    query: &FileQuery,
    output: Option<&PathBuf>,
) -> Result<ExitCode, Failure> {
    let mem = open(cli)?;
    let kernel = kernel.find(&mem)?;
    let contents = kernel.cached_file(query)?;
    let written = match output {
        Some(path) => {
            if path.exists() && !path.is_file() {
                return Err(Failure(format!("{} is not a regular file", path.display())));
            }
            let mut file = File::create(path)
                .map_err(|e| Failure(format!("cannot create {}: {e}", path.display())))?;
            write_sparse(&mut file, &contents)
                .map_err(|e| Failure(format!("cannot write {}: {e}", path.display())))
        }
        None => write_zeros(&mut io::stdout().lock(), &contents).map_err(|e| {
            if e.kind() == io::ErrorKind::BrokenPipe {
                crate::output::end_on_closed_pipe();
            }
            Failure(format!("cannot write the file's bytes: {e}"))
        }),
    };
    written?;
    let f = &contents.file;
    for r in &contents.missing {
        errln!(
            "leechio: pages {}..{} (bytes {}..{}) of {} are not in the page cache: written as {}",
            r.start,
            r.end,
            r.start * PAGE,
            (r.end * PAGE).min(f.size),
            escape(f.path.as_deref().unwrap_or("the file")),
            if output.is_some() { "a hole" } else { "zeros" }
        );
    }
    report(&contents.failed);
    if cli.json {
        let mut object = file_json(f);
        object["pages_read"] = json!(contents.pages.len());
        object["missing_pages"] = contents
            .missing
            .iter()
            .map(|r| json!([r.start, r.end]))
            .collect();
        object["failed"] = contents.failed.iter().map(|f| f.to_string()).collect();
        object["complete"] = json!(contents.complete());
        outln!("{object}");
    }
    Ok(match contents.complete() {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(PARTIAL),
    })
}

/// The file into `out`, a page not read as zeros.
fn write_zeros(out: &mut impl Write, contents: &FileContents) -> io::Result<()> {
    let zeros = [0u8; PAGE as usize];
    let mut at = 0;
    for (index, page) in &contents.pages {
        let start = index * PAGE;
        while at < start {
            let n = (start - at).min(PAGE);
            out.write_all(&zeros[..n as usize])?;
            at += n;
        }
        out.write_all(page)?;
        at += page.len() as u64;
    }
    while at < contents.file.size {
        let n = (contents.file.size - at).min(PAGE);
        out.write_all(&zeros[..n as usize])?;
        at += n;
    }
    out.flush()
}

/// The file into `file`, a page not read left a hole.
fn write_sparse(file: &mut File, contents: &FileContents) -> io::Result<()> {
    for (index, page) in &contents.pages {
        file.seek(SeekFrom::Start(index * PAGE))?;
        file.write_all(page)?;
    }
    file.set_len(contents.file.size)?;
    file.sync_all()
}
