//! The kernel's generic data structures, walked level by level: every
//! node of a level read in one batch, so a walk costs the structure's
//! depth, not its size. They know nothing of what they hold: the walks
//! that use them give the offsets and the bounds.

pub(crate) mod list;
pub(crate) mod maple;
pub(crate) mod rbtree;
pub(crate) mod xarray;

use std::fmt;

/// A node of a structure that could not be read, or was read and not
/// believed (a loop, a node changing while read, a bound reached): where,
/// and why. The one way every walk of this folder fails; each user words
/// it in its own terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructureFailure {
    /// The kernel address of the node (or of what it names).
    pub address: u64,
    /// What was wrong, in one line.
    pub reason: String,
}

impl StructureFailure {
    /// A failure at `address`.
    pub(crate) fn new(address: u64, reason: impl Into<String>) -> StructureFailure {
        StructureFailure {
            address,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for StructureFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}: {}", self.address, self.reason)
    }
}
