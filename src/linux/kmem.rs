//! Reads of kernel virtual memory by the cheapest path there is: the
//! image and the direct map are linear, so an address in either is read by
//! its physical address with no page walk (one device call for any number
//! of them); anything else (vmalloc, fixmaps) through the kernel's page
//! tables.

use crate::linux::find::image::Segment;
use crate::{AddressSpace, Memory};

/// Kernel virtual memory over `mem`.
#[derive(Clone, Copy)]
pub(crate) struct KernelMemory<'a> {
    pub mem: &'a Memory,
    /// The image's mapping.
    pub segments: &'a [Segment],
    /// `page_offset_base`.
    pub direct_map_base: u64,
    /// The device's highest address: the direct map ends there.
    pub limit: u64,
    /// The kernel's page tables, for the rest.
    pub space: &'a AddressSpace,
}

impl<'a> KernelMemory<'a> {
    /// Kernel memory of made-up tests: all of `space`'s memory as the
    /// direct map from `direct_map_base`, and no image.
    #[cfg(test)]
    pub fn direct_map_only(space: &'a AddressSpace, direct_map_base: u64) -> KernelMemory<'a> {
        KernelMemory {
            mem: space.memory(),
            segments: &[],
            direct_map_base,
            limit: space.memory().backend().max_address(),
            space,
        }
    }

    /// The first address of the kernel half, where every kernel pointer
    /// lies (it depends on the paging mode).
    pub fn kernel_half(&self) -> u64 {
        self.space.paging().upper_half()
    }

    /// The physical address of `va` when it lies in the image or the
    /// direct map.
    pub fn physical(&self, va: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| (s.va..s.va + s.len).contains(&va))
            .map(|s| s.pa + (va - s.va))
            .or_else(|| {
                va.checked_sub(self.direct_map_base)
                    .filter(|pa| *pa < self.limit)
            })
    }

    /// Reads `buf.len()` bytes at `va`; the reason, naming the address,
    /// when any byte fails.
    pub async fn read(&self, va: u64, buf: &mut [u8]) -> Result<(), String> {
        let result = match self.physical(va) {
            Some(pa) => self.mem.read(pa, buf).await,
            None => self.space.read(va, buf).await,
        };
        result.map_err(|e| match e.failed.first() {
            Some(f) => format!(
                "{:#x}..{:#x} unreadable: {}",
                va.wrapping_add(f.offset as u64),
                va.wrapping_add((f.offset + f.len) as u64),
                f.reason
            ),
            None => format!("{va:#x} unreadable"),
        })
    }

    /// Reads `len` bytes at `va` into a new buffer.
    pub async fn read_vec(&self, va: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; len];
        self.read(va, &mut buf).await?;
        Ok(buf)
    }
}

/// Little-endian integers at byte offsets of a structure read whole.
pub(crate) trait Fields {
    /// The 8 bytes at `at`.
    fn u64_at(&self, at: u64) -> Option<u64>;
    /// The 4 bytes at `at`.
    fn u32_at(&self, at: u64) -> Option<u32>;
    /// The `len` bytes at `at`.
    fn bytes_at(&self, at: u64, len: u64) -> Option<&[u8]>;
}

impl Fields for [u8] {
    fn u64_at(&self, at: u64) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes_at(at, 8)?.try_into().ok()?))
    }

    fn u32_at(&self, at: u64) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes_at(at, 4)?.try_into().ok()?))
    }

    fn bytes_at(&self, at: u64, len: u64) -> Option<&[u8]> {
        let start = usize::try_from(at).ok()?;
        self.get(start..start.checked_add(usize::try_from(len).ok()?)?)
    }
}
