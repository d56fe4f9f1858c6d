//! Reads of kernel virtual addresses for the walks of kernel structures:
//! slab objects by the direct map and the image's data by its physical
//! layout, both without a page walk; anything else (vmalloc) through the
//! kernel's page tables.

use crate::linux::image::Image;
use crate::{AddressSpace, Memory};

/// What a walk reads kernel memory through.
#[derive(Clone, Copy)]
pub(crate) struct KernelReader<'a> {
    mem: &'a Memory,
    /// `page_offset_base`: physical `pa` is at `direct_map + pa`.
    direct_map: u64,
    /// The end of physical memory (the direct map's extent).
    limit: u64,
    image: Option<&'a Image>,
    /// The kernel's address space, for addresses outside both.
    space: Option<&'a AddressSpace>,
}

impl<'a> KernelReader<'a> {
    /// A reader of `mem` whose direct map starts at `direct_map`.
    pub fn new(mem: &'a Memory, direct_map: u64) -> KernelReader<'a> {
        KernelReader {
            mem,
            direct_map,
            limit: mem.backend().max_address(),
            image: None,
            space: None,
        }
    }

    /// The same, reading the kernel image by `image` and other addresses
    /// through `space`.
    pub fn with_image(self, image: &'a Image, space: &'a AddressSpace) -> KernelReader<'a> {
        KernelReader {
            image: Some(image),
            space: Some(space),
            ..self
        }
    }

    /// The physical address of `len` bytes at `va`, when they lie in the
    /// direct map or the image (where they are physically contiguous).
    fn physical(&self, va: u64, len: usize) -> Option<u64> {
        let last = va.checked_add(len.max(1) as u64 - 1)?;
        if let Some(pa) = va.checked_sub(self.direct_map) {
            if last - self.direct_map < self.limit {
                return Some(pa);
            }
        }
        let image = self.image?;
        let pa = image.physical(va)?;
        (image.physical(last)? == pa + (last - va)).then_some(pa)
    }

    /// Reads `len` bytes at kernel address `va`; a reason when any of them
    /// cannot be read.
    pub async fn read(&self, va: u64, len: usize) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; len];
        let result = match (self.physical(va, len), self.space) {
            (Some(pa), _) => self.mem.read(pa, &mut buf).await,
            (None, Some(space)) => space.read(va, &mut buf).await,
            (None, None) => return Err(format!("{va:#x} is not in the direct map")),
        };
        match result {
            Ok(()) => Ok(buf),
            Err(e) => Err(format!("cannot read {len} bytes at {va:#x}: {e}")),
        }
    }
}

/// The little-endian `u64` at `at` in `bytes`, if it lies inside.
pub(crate) fn word(bytes: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// The little-endian `u32` at `at` in `bytes`, if it lies inside.
pub(crate) fn word32(bytes: &[u8], at: u64) -> Option<u32> {
    let at = usize::try_from(at).ok()?;
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The NUL-terminated string at the start of `bytes` (all of it without a
/// NUL), if it is printable UTF-8.
pub(crate) fn c_string(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    (!text.chars().any(char::is_control)).then(|| text.to_string())
}
