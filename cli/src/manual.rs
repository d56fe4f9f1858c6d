//! The man pages, made from the command line's own definitions: leechio(1)
//! and leechio-COMMAND(1) for each command (and each of its own commands),
//! so a page never says other than `--help`. `make install` writes them with
//! the hidden command `leechio man DIR`.

use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;

use super::{Cli, Failure};

/// Writes every page into `dir` (created if missing), one line a page.
pub(super) fn write(dir: &Path) -> Result<ExitCode, Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure(format!("cannot create {}: {e}", dir.display())))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .map_err(|e| Failure(format!("writing the man pages into {}: {e}", dir.display())))?;
    let mut pages: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Failure(format!("cannot list {}: {e}", dir.display())))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("leechio") && name.ends_with(".1"))
        .collect();
    pages.sort();
    for page in pages {
        outln!("{}", dir.join(page).display());
    }
    Ok(ExitCode::SUCCESS)
}
