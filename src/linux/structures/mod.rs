//! The kernel's generic data structures, walked level by level: every
//! node of a level read in one batch, so a walk costs the structure's
//! depth, not its size. They know nothing of what they hold: the walks
//! that use them give the offsets and the bounds.

pub(crate) mod maple;
pub(crate) mod rbtree;
pub(crate) mod xarray;
