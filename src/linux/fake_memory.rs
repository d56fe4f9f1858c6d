//! Kernel memory made up for the walks' unit tests: objects laid one after
//! another in the direct map of a byte vector, then read back as kernel
//! memory, with the read calls counted.

use std::sync::Arc;

use crate::linux::kmem::KernelMemory;
use crate::{AddressSpace, MemBackend, Memory};

/// The made-up kernel's direct map (4-level paging's, without KASLR).
pub(crate) const DIRECT: u64 = 0xffff_8880_0000_0000;

/// A made-up kernel's memory, its objects allocated from the bottom up.
pub(crate) struct FakeMemory {
    pub bytes: Vec<u8>,
    top: u64,
}

impl FakeMemory {
    /// `len` bytes of zeros, objects allocated from 4 KiB up.
    pub fn new(len: usize) -> FakeMemory {
        FakeMemory {
            bytes: vec![0; len],
            top: 0x1000,
        }
    }

    /// `len` bytes, 64-byte aligned: their direct-map address.
    pub fn alloc(&mut self, len: u64) -> u64 {
        self.top = self.top.next_multiple_of(64);
        let va = DIRECT + self.top;
        self.top += len;
        va
    }

    pub fn put(&mut self, va: u64, value: u64) {
        self.put_bytes(va, &value.to_le_bytes());
    }

    pub fn put_u32(&mut self, va: u64, value: u32) {
        self.put_bytes(va, &value.to_le_bytes());
    }

    pub fn put_bytes(&mut self, va: u64, bytes: &[u8]) {
        let pa = (va - DIRECT) as usize;
        self.bytes[pa..pa + bytes.len()].copy_from_slice(bytes);
    }

    /// `s` and its NUL, allocated: its address.
    pub fn string(&mut self, s: &str) -> u64 {
        let at = self.alloc(s.len() as u64 + 1);
        self.put_bytes(at, s.as_bytes());
        at
    }

    /// Runs `f` over a copy of the memory as kernel memory (the direct map
    /// only): what it returns, and the read calls it made.
    pub fn read<T>(&self, f: impl AsyncFnOnce(&KernelMemory<'_>) -> T) -> (T, u64) {
        let backend = Arc::new(MemBackend::new(self.bytes.clone()));
        let mem = Memory::with_config(backend.clone(), Default::default());
        let space = AddressSpace::new(mem.clone(), 0, crate::vm::Paging::FourLevel);
        let kmem = KernelMemory::direct_map_only(&space, DIRECT);
        let out = mem.block_on(f(&kmem));
        (out, backend.read_calls())
    }
}
