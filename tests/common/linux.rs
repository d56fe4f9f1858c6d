//! What the tests of a Linux target found in memory share: an engine
//! over a device, and hints that leave the user's kernel cache alone.

use std::sync::Arc;

use leechio::linux::{CacheLocation, Hints};
use leechio::{EngineConfig, LeechCore, Memory};

/// An engine over `device`, and the device, for LeechCore's counters.
pub fn engine(device: LeechCore) -> (Memory, Arc<LeechCore>) {
    let device = Arc::new(device);
    (
        Memory::with_config(device.clone(), EngineConfig::default()),
        device,
    )
}

/// Hints that neither read nor write the cache of kernels found.
pub fn no_cache() -> Hints {
    Hints {
        cache: CacheLocation::Off,
        ..Hints::default()
    }
}
