//! What the tests of a Linux target found in memory share: an engine
//! over a device, hints that leave the user's kernel cache alone, and
//! kernel lists unlinked as a rootkit does, put back after.

use std::sync::Arc;

use super::qemu::Guest;
use leechio::linux::{CacheLocation, Hints, Kernel};
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

/// The pid of the guest's `sleep 100001`, which tests may hide (and put
/// back).
pub fn sleeper(guest: &Guest) -> u32 {
    let sleep = guest
        .processes()
        .into_iter()
        .find(|t| t.cmdline == ["sleep", "100001"]);
    sleep.expect("the guest's sleep 100001").pid
}

/// Words of kernel memory changed through the device, put back as they
/// were when this drops (the test failing or not: the guest is shared).
pub struct Unlinked<'m> {
    mem: &'m Memory,
    /// `(physical address, original word)`, in the order written.
    words: Vec<(u64, u64)>,
}

impl<'m> Unlinked<'m> {
    /// Nothing changed yet, in `mem`.
    pub fn new(mem: &'m Memory) -> Unlinked<'m> {
        Unlinked {
            mem,
            words: Vec::new(),
        }
    }

    /// Reads the word at kernel address `va` through the kernel's tables.
    pub fn read(kernel: &Kernel, va: u64) -> u64 {
        let mut word = [0u8; 8];
        kernel
            .memory()
            .block_on(kernel.space().read(va, &mut word))
            .unwrap();
        u64::from_le_bytes(word)
    }

    /// Writes `value` at kernel address `va` through the device, keeping
    /// the word it replaces.
    pub fn write(&mut self, kernel: &Kernel, va: u64, value: u64) {
        let pa = self.mem.block_on(kernel.space().translate(va)).unwrap().pa;
        let mut old = [0u8; 8];
        self.mem.block_on(self.mem.read(pa, &mut old)).unwrap();
        self.words.push((pa, u64::from_le_bytes(old)));
        self.mem
            .block_on(self.mem.write(pa, &value.to_le_bytes()))
            .unwrap();
    }

    /// Takes the node at `node` (a `list_head`) out of its list as
    /// `list_del` does but leaves its own links: its `prev`'s `next` is its
    /// `next`, its `next`'s `prev` its `prev`.
    pub fn unlink(&mut self, kernel: &Kernel, node: u64) {
        let (next, prev) = (Self::read(kernel, node), Self::read(kernel, node + 8));
        self.write(kernel, prev, next);
        self.write(kernel, next + 8, prev);
    }
}

impl Drop for Unlinked<'_> {
    fn drop(&mut self) {
        for &(pa, word) in self.words.iter().rev() {
            let _ = self.mem.block_on(self.mem.write(pa, &word.to_le_bytes()));
        }
    }
}

/// Whether a red-black tree of between `min_nodes` and `max_nodes` nodes
/// can be `levels` high: 2^h - 1 >= n >= 2^(h/2) - 1 for height h.
pub fn red_black_height_fits(min_nodes: u64, max_nodes: u64, levels: u64) -> bool {
    min_nodes > 0
        && levels > u64::from(min_nodes.ilog2())
        && levels as f64 <= 2.0 * ((max_nodes + 1) as f64).log2()
}
