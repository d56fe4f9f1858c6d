//! A kernel from the cache: an entry checked against memory, warm (one
//! batch, the walks' BTF answers from the entry) when the entry has what
//! that takes, else its tables, BTF and build ID read again.

use super::btf::{self, Btf, BtfError};
use super::cache;
use super::image::{self, Image, KERNEL_MAP};
use super::init_task::InitTask;
use super::search::finish;
use super::{banner_at, build_id_note, Hints, BANNER_MAX, GIB, L5_SYMBOL};
use crate::linux::kmem::Fields;
use crate::linux::offsets::{ask_walk_questions, Offsets};
use crate::linux::{Kernel, Source};
use crate::vm::Paging;
use crate::{AddressSpace, Memory};

/// The banner of `entry`, read where its image puts it, if it is still
/// the same.
async fn cached_banner(mem: &Memory, entry: &cache::Entry) -> Option<()> {
    let va = *entry.symbols.get("linux_banner")?;
    let pa = va
        .checked_sub(entry.virtual_base)?
        .checked_add(entry.physical_base)?;
    let mut buf = vec![0u8; BANNER_MAX];
    if let Err(err) = mem.read(pa, &mut buf).await {
        err.zero_fill(&mut buf);
    }
    (banner_at(&buf)? == entry.banner).then_some(())
}

/// A kernel from the cache, if one entry's banner is in memory where it
/// says and everything else checks out, and whether it was warm (checked
/// in one batch, with no BTF read). The newest entry is tried warm; then
/// its banner, tables and BTF are read together (the usual case: the same
/// kernel as last time); the others' banners then in one batch.
pub(super) async fn from_cache(
    mem: &Memory,
    hints: &Hints,
    entries: &[cache::Entry],
) -> Option<(Kernel, bool)> {
    let first = entries.first()?;
    if let Some(kernel) = warm_kernel(mem, hints, first).await {
        return Some((kernel, true));
    }
    if let Some(kernel) = cached_kernel(mem, hints, first, true).await {
        return Some((kernel, false));
    }
    let rest = &entries[1..];
    let banners = futures::future::join_all(rest.iter().map(|e| cached_banner(mem, e))).await;
    let entry = rest.iter().zip(banners).find(|(_, b)| b.is_some())?.0;
    cached_kernel(mem, hints, entry, false)
        .await
        .map(|k| (k, false))
}

/// The image an entry describes, if its mapping is one a kernel could
/// have: from `_text`, contiguous, linear, below `limit`, within the image
/// map.
fn cached_image(entry: &cache::Entry, warm: &cache::Warm, limit: u64) -> Option<Image> {
    let first = warm.segments.first()?;
    let mut va = entry.virtual_base;
    for s in &warm.segments {
        let fits = s.va == va
            && s.len > 0
            && s.len % 0x1000 == 0
            && s.pa.checked_sub(entry.physical_base)? == s.va - entry.virtual_base
            && s.pa.checked_add(s.len)? <= limit;
        if !fits {
            return None;
        }
        va = va.checked_add(s.len)?;
    }
    let sane = first.pa == entry.physical_base
        && entry.virtual_base >= KERNEL_MAP
        && va - entry.virtual_base <= GIB
        && entry.dtb < limit;
    sane.then(|| Image {
        root: entry.dtb,
        paging: entry.paging,
        top_entry: warm.top_entry,
        virtual_base: entry.virtual_base,
        physical_base: entry.physical_base,
        segments: warm.segments.clone(),
    })
}

/// Reads `len` bytes at physical `pa`, failed bytes zero.
async fn read_zeroed(mem: &Memory, pa: Option<u64>, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    if let Some(pa) = pa {
        if let Err(e) = mem.read(pa, &mut buf).await {
            e.zero_fill(&mut buf);
        }
    }
    buf
}

/// The kernel `entry` describes, checked in one batch of reads and with
/// the walks' BTF answers from the entry: `None` when the entry lacks
/// anything that takes (then it is checked the slow way), or memory does
/// not hold that kernel as the entry says. Read, each where the entry
/// puts it: the banner and the build-ID note (the same build), the top
/// table's image entry (the same tables), `init_task` (its comm, pid 0,
/// `real_parent` itself: the same virtual base, which KASLR moves apart
/// from the physical one), `page_offset_base` (the same direct map) and
/// `init_struct_pid`'s namespace (`init_pid_ns`, as kallsyms said).
async fn warm_kernel(mem: &Memory, hints: &Hints, entry: &cache::Entry) -> Option<Kernel> {
    let warm = entry.warm.as_ref()?;
    let limit = mem.backend().max_address();
    if hints.kernel_base.is_some_and(|b| b != entry.virtual_base)
        || hints.paging.is_some_and(|p| p != entry.paging)
    {
        return None;
    }
    let image = cached_image(entry, warm, limit)?;
    let (btf_va, btf_len) = entry.btf?;
    let btf = Btf::recorded(
        warm.answers.clone(),
        usize::try_from(btf_len).ok()?,
        warm.type_count,
    )?;
    // Every question the walks ask must have its answer kept.
    if ask_walk_questions(&btf)
        .iter()
        .any(|e| matches!(e, BtfError::NotKept(..)))
    {
        log::info!(
            "cached kernel {:?}: its BTF answers are incomplete",
            entry.banner
        );
        return None;
    }
    let offsets = Offsets::from_btf(&btf).ok()?;
    let layout = offsets.init_task;
    let real_parent = layout.real_parent?;
    let symbol = |name: &str| entry.symbols.get(name).copied();
    let (init_task, banner_va, offset_base, ns) = (
        symbol("init_task")?,
        symbol("linux_banner")?,
        symbol("page_offset_base")?,
        symbol("init_pid_ns")?,
    );
    let task_size = usize::try_from(layout.size)
        .ok()
        .filter(|s| (64..=1 << 16).contains(s))?;
    let (note_va, note) = &warm.build_id;
    let tops: Vec<u64> = [
        Some(entry.dtb),
        hints.dtb.map(|d| d & 0x000f_ffff_ffff_f000),
    ]
    .into_iter()
    .flatten()
    .collect();
    let pid_ns_at = warm.init_thread_pid.checked_add(layout.pid_ns)?;
    // The same kernel may run in either mode (a CPU without LA57, or
    // `no5lvl`): its own word on the mode, where it keeps one.
    let l5 = symbol(L5_SYMBOL).and_then(|va| image.physical(va));
    let (banner, build_id, task, offset_base, pid_ns, top_entries, l5) = futures::join!(
        read_zeroed(mem, image.physical(banner_va), BANNER_MAX),
        read_zeroed(mem, image.physical(*note_va), note.len()),
        read_zeroed(mem, image.physical(init_task), task_size),
        read_zeroed(mem, image.physical(offset_base), 8),
        read_zeroed(mem, image.physical(pid_ns_at), 8),
        futures::future::join_all(tops.iter().map(|&t| read_zeroed(mem, Some(t + 511 * 8), 8))),
        async {
            match l5 {
                Some(pa) => Some(mem.read_val::<u32>(pa).await.ok()),
                None => None,
            }
        },
    );
    let word = |b: &[u8], at: u64| b.u64_at(at);
    let comm = task.as_slice().bytes_at(layout.comm, 16)?;
    let comm = &comm[..comm.iter().position(|&c| c == 0).unwrap_or(16)];
    let checks = [
        (
            "banner",
            banner_at(&banner).as_deref() == Some(entry.banner.as_str()),
        ),
        ("build ID", build_id == *note),
        (
            "top table",
            top_entries
                .iter()
                .all(|e| word(e, 0) == Some(warm.top_entry)),
        ),
        ("init_task comm", comm == b"swapper/0" || comm == b"swapper"),
        (
            "init_task pid",
            task.as_slice().u32_at(layout.pid) == Some(0),
        ),
        (
            "init_task real_parent",
            word(&task, real_parent) == Some(init_task),
        ),
        (
            "init_task thread_pid",
            word(&task, layout.thread_pid) == Some(warm.init_thread_pid),
        ),
        (
            "page_offset_base",
            word(&offset_base, 0) == Some(warm.direct_map_base),
        ),
        ("init_pid_ns", word(&pid_ns, 0) == Some(ns)),
        (
            "paging mode",
            l5.is_none_or(|l5| l5 == Some(u32::from(entry.paging == Paging::FiveLevel))),
        ),
    ];
    if let Some((what, _)) = checks.iter().find(|(_, ok)| !ok) {
        log::info!(
            "cached kernel {:?}: its {what} differs in memory",
            entry.banner
        );
        return None;
    }
    let btf_pa = image.physical(btf_va)?;
    let loader_mem = mem.clone();
    let btf = btf.with_loader(move || {
        let mut blob = vec![0u8; btf_len as usize];
        loader_mem
            .block_on(loader_mem.read(btf_pa, &mut blob))
            .map_err(|e| BtfError::Parse(format!("BTF at {btf_va:#x} cannot be read: {e}")))?;
        Btf::parse(&blob)
    });
    Some(Kernel {
        space: AddressSpace::new(mem.clone(), entry.dtb, entry.paging),
        image,
        direct_map_base: warm.direct_map_base,
        btf,
        btf_location: entry.btf,
        symbols: entry.symbols.clone(),
        banner: entry.banner.clone(),
        init_task: InitTask {
            address: init_task,
            comm: String::from_utf8_lossy(comm).into_owned(),
            pid_ns: ns,
        },
        source: Source::Cache,
        offsets,
        build_id: Some(warm.build_id.clone()),
        init_thread_pid: warm.init_thread_pid,
    })
}

/// The kernel `entry` describes, checked against memory: its banner
/// (unless already checked), its tables, its BTF and its build ID
/// together, then as a search's.
async fn cached_kernel(
    mem: &Memory,
    hints: &Hints,
    entry: &cache::Entry,
    check_banner: bool,
) -> Option<Kernel> {
    let limit = mem.backend().max_address();
    let dtb = hints.dtb.unwrap_or(entry.dtb);
    let in_image = |va: u64| {
        va.checked_sub(entry.virtual_base)?
            .checked_add(entry.physical_base)
    };
    let btf_blob = async {
        match entry.btf {
            Some((va, len)) if len <= btf::MAX_BTF as u64 => {
                let mut blob = vec![0u8; len as usize];
                mem.read(in_image(va)?, &mut blob).await.ok()?;
                Some(blob)
            }
            _ => None,
        }
    };
    let notes = async {
        let start = *entry.symbols.get("__start_notes")?;
        let len = entry.symbols.get("__stop_notes")?.checked_sub(start)?;
        let notes = read_zeroed(
            mem,
            in_image(start),
            usize::try_from(len.min(1 << 16)).ok()?,
        )
        .await;
        build_id_note(&notes, start)
    };
    let banner = async {
        match check_banner {
            true => cached_banner(mem, entry).await,
            false => Some(()),
        }
    };
    if hints.paging.is_some_and(|p| p != entry.paging) {
        return None;
    }
    let (banner, image, blob, build_id) = futures::join!(
        banner,
        image::image_of(mem, dtb, Some(entry.virtual_base), limit, entry.paging),
        btf_blob,
        notes
    );
    banner?;
    // Another build under the same banner: not the kernel the entry knew.
    if entry
        .warm
        .as_ref()
        .is_some_and(|w| build_id.as_ref() != Some(&w.build_id))
    {
        log::info!("cached kernel {:?}: its build ID differs", entry.banner);
        return None;
    }
    let Some(image) = image.filter(|i| i.physical_base == entry.physical_base) else {
        log::info!(
            "cached kernel {:?}: its tables no longer match",
            entry.banner
        );
        return None;
    };
    let (btf, btf_location) = match (blob, entry.btf) {
        (Some(blob), location) => (Btf::parse(&blob).ok()?, location),
        (None, None) => (Btf::from_file(hints.btf_file.as_deref()?).ok()?, None),
        (None, Some(_)) => return None,
    };
    let result = finish(
        mem,
        image,
        btf,
        btf_location,
        entry.symbols.clone(),
        entry.banner.clone(),
        Source::Cache,
    )
    .await;
    match result {
        Ok(mut kernel) => {
            kernel.build_id = build_id;
            Some(kernel)
        }
        Err(e) => {
            log::info!("cached kernel {:?} no longer checks out: {e}", entry.banner);
            None
        }
    }
}
