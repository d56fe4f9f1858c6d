//! A file's cached pages: its mapping's page array, a level of nodes per
//! batch, then every page's bytes in one batch, by frame (a page
//! pointer's index in `vmemmap`).

use std::ops::Range;

use super::{CacheFailure, CachedFile, PAGE};
use crate::join_all;
use crate::linux::kmem::KernelMemory;
use crate::linux::offsets::CacheLayout;
use crate::linux::structures::xarray::{self, Limits};

/// What was read of a file.
#[derive(Debug, Default)]
pub(super) struct Read {
    pub(super) pages: Vec<(u64, Vec<u8>)>,
    pub(super) missing: Vec<Range<u64>>,
    pub(super) failed: Vec<CacheFailure>,
}

/// A run of pages to read: the file's first page index, the frame, how
/// many.
#[derive(Debug, Clone, Copy)]
struct Run {
    index: u64,
    frame: u64,
    count: u64,
}

/// The pages of `file`, whose page array's head is `head`, below its
/// size; `struct page`s start at `vmemmap`.
pub(super) async fn read(
    kmem: &KernelMemory<'_>,
    layout: &CacheLayout,
    vmemmap: u64,
    file: &CachedFile,
    head: u64,
) -> Read {
    let mut out = Read::default();
    let total = file.size.div_ceil(PAGE);
    if total == 0 {
        return out;
    }
    let frames = kmem.limit / PAGE;
    let limits = Limits {
        max_index: total - 1,
        max_entries: total.min(frames) as usize,
        multi_index: true,
    };
    let array = file.mapping + layout.a_pages;
    let found = xarray::entries(kmem, &layout.xa, array, head, limits).await;
    out.failed
        .extend(found.failed.into_iter().map(|f| CacheFailure {
            address: f.address,
            reason: format!("page array: {}", f.reason),
        }));
    let mut runs = Vec::new();
    let mut budget = frames;
    for (&(index, page), &span) in found.entries.iter().zip(&found.spans) {
        match run(layout, vmemmap, frames, index, page, span, total) {
            Ok(r) if r.count <= budget => {
                budget -= r.count;
                runs.push(r);
            }
            Ok(_) => {
                let why = format!(
                    "page {index}: more pages than the target's memory holds ({frames}): cut"
                );
                out.failed.push(CacheFailure {
                    address: page,
                    reason: why,
                });
                break;
            }
            Err(why) => out.failed.push(CacheFailure {
                address: page,
                reason: format!("page {index}: {why}"),
            }),
        }
    }
    runs.sort_by_key(|r| r.index);
    runs.dedup_by_key(|r| r.index);
    let read = join_all(runs.iter().map(|r| async move {
        let mut buf = vec![0u8; (r.count * PAGE) as usize];
        kmem.mem
            .read(r.frame * PAGE, &mut buf)
            .await
            .map(|()| buf)
            .map_err(|e| e.to_string())
    }))
    .await;
    let mut have: Vec<Range<u64>> = Vec::new();
    for (r, bytes) in runs.iter().zip(read) {
        match bytes {
            Ok(bytes) => {
                for (k, page) in bytes.chunks_exact(PAGE as usize).enumerate() {
                    let index = r.index + k as u64;
                    let len = (file.size - index * PAGE).min(PAGE) as usize;
                    out.pages.push((index, page[..len].to_vec()));
                }
                have.push(r.index..r.index + r.count);
            }
            Err(why) => out.failed.push(CacheFailure {
                address: r.frame * PAGE,
                reason: format!(
                    "pages {}..{} at frame {:#x}: {why}",
                    r.index,
                    r.index + r.count,
                    r.frame
                ),
            }),
        }
    }
    out.missing = gaps(&have, total);
    out
}

/// The run of the entry `page` at `index` covering `span` indices, if
/// it is a page the kernel could have cached there.
fn run(
    layout: &CacheLayout,
    vmemmap: u64,
    frames: u64,
    index: u64,
    page: u64,
    span: u64,
    total: u64,
) -> Result<Run, String> {
    let offset = page
        .checked_sub(vmemmap)
        .ok_or_else(|| format!("{page:#x} lies below vmemmap ({vmemmap:#x})"))?;
    if offset % layout.page_size != 0 {
        return Err(format!(
            "{page:#x} is not a struct page of vmemmap ({vmemmap:#x}, {} bytes each)",
            layout.page_size
        ));
    }
    let frame = offset / layout.page_size;
    if !span.is_power_of_two() || index % span != 0 {
        return Err(format!(
            "an entry covering {span} pages from index {index}, which no folio does"
        ));
    }
    let count = span.min(total - index);
    if frame % span != 0 || frame.checked_add(count).is_none_or(|end| end > frames) {
        return Err(format!(
            "frame {frame:#x} of a folio of {span} pages lies past the end of memory or out of its alignment"
        ));
    }
    Ok(Run {
        index,
        frame,
        count,
    })
}

/// The ranges of `0..total` that `have` (sorted, disjoint) leaves out.
fn gaps(have: &[Range<u64>], total: u64) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = 0;
    for r in have {
        if r.start > at {
            out.push(at..r.start);
        }
        at = at.max(r.end);
    }
    if at < total {
        out.push(at..total);
    }
    out
}
