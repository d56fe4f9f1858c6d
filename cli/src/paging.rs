//! The paging mode page tables are read in: the one `--paging` names, or
//! else the one the tables themselves show (`leechio::vm::detect_paging`).
//! A 4-level reading of 5-level tables (or the reverse) gives wrong
//! answers that look right, so where the tables do not tell, the command
//! stops and asks.

use std::sync::OnceLock;

use leechio::vm::detect_paging;
use leechio::{AddressSpace, Memory, Paging};

use crate::Failure;

/// What `--paging` said, set once at start.
static GIVEN: OnceLock<Option<Paging>> = OnceLock::new();

/// Parses `--paging`: 4 or 5 (levels).
pub fn parse(text: &str) -> Result<Paging, String> {
    text.trim()
        .parse::<u8>()
        .ok()
        .and_then(Paging::from_levels)
        .ok_or_else(|| format!("paging mode {text:?}: give 4 or 5 (levels of page tables)"))
}

/// Records `--paging` for the whole run.
pub fn set(paging: Option<Paging>) {
    let _ = GIVEN.set(paging);
}

/// The mode `--paging` named, if it did.
pub fn given() -> Option<Paging> {
    GIVEN.get().copied().flatten()
}

/// The mode of the tables at `dtb`: `--paging`'s, else what the tables
/// show, else an error that says why they do not.
pub fn of(mem: &Memory, dtb: u64) -> Result<Paging, Failure> {
    if let Some(paging) = given() {
        return Ok(paging);
    }
    let evidence = mem.block_on(detect_paging(mem, dtb));
    let paging = evidence.paging().map_err(|why| match evidence.unreadable {
        Some(_) => Failure(why),
        None => Failure(format!("{why}; give --paging 4 or 5")),
    })?;
    log::info!("the tables at {dtb:#x} read as {paging} paging");
    Ok(paging)
}

/// The address space of the tables at `dtb`, in their mode (see [`of`]).
pub fn space(mem: &Memory, dtb: u64) -> Result<AddressSpace, Failure> {
    Ok(AddressSpace::new(mem.clone(), dtb, of(mem, dtb)?))
}
