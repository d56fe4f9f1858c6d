//! A search of memory for the kernel: its top table, its image, the
//! read-only data where kallsyms, the banner and BTF lie; then the checks
//! of `init_task` that every kernel found passes, searched or cached.

use std::collections::BTreeMap;

use super::btf::{self, Btf};
use super::image::{self, Image, KERNEL_MAP, KERNEL_MAP_SIZE};
use super::init_task;
use super::kallsyms;
use super::{
    banner_at, build_id_note, default_direct_map, find_banner, FindError, Hints, GIB, L5_SYMBOL,
    ROOTS_AT_ONCE, SYMBOLS,
};
use crate::linux::kmem::Fields;
use crate::linux::offsets::Offsets;
use crate::linux::{Kernel, Source};
use crate::vm::{detect_paging, Paging};
use crate::{AddressSpace, Memory};

/// A search: top table, image, read-only data, symbols, BTF, checks.
pub(super) async fn search(mem: &Memory, hints: &Hints) -> Result<Kernel, FindError> {
    let limit = mem.backend().max_address();
    if let Some(va) = hints.kernel_base.filter(|&va| !image::is_image_base(va)) {
        return Err(FindError::BadHint(format!(
            "kernel base {va:#x} is not a 2 MiB aligned address in {KERNEL_MAP:#x}..{:#x}",
            KERNEL_MAP + KERNEL_MAP_SIZE
        )));
    }
    let roots = match hints.dtb {
        Some(dtb) => vec![dtb & 0x000f_ffff_ffff_f000],
        None => image::low_memory_roots(mem, limit).await,
    };
    if roots.is_empty() {
        return Err(FindError::NotLinux(
            "no kernel top-level page table in the first MiB of RAM (the trampoline's copy); give the DTB".into(),
        ));
    }
    // A few candidates at a time, in order, each read in both modes:
    // memory where many pages look like top tables costs more calls, not
    // more memory.
    let modes = match hints.paging {
        Some(paging) => vec![paging],
        None => Paging::ALL.to_vec(),
    };
    let mut found = None;
    let mut ambiguous = None;
    for group in roots.chunks(ROOTS_AT_ONCE) {
        let candidates = futures::future::join_all(group.iter().flat_map(|&root| {
            modes
                .iter()
                .map(move |&paging| image::image_of(mem, root, hints.kernel_base, limit, paging))
        }))
        .await;
        // Where both readings lead to an image, the tables must say which:
        // those roots' evidence in one go.
        let both: Vec<u64> = group
            .iter()
            .zip(candidates.chunks(modes.len()))
            .filter(|(_, images)| images.iter().flatten().count() > 1)
            .map(|(&root, _)| root)
            .collect();
        let evidence = futures::future::join_all(both.iter().map(|&r| detect_paging(mem, r))).await;
        for (&root, images) in group.iter().zip(candidates.chunks(modes.len())) {
            let mut images: Vec<Image> = images.iter().flatten().cloned().collect();
            if images.len() > 1 {
                let at = both.iter().position(|&r| r == root).expect("looked at");
                match evidence[at].paging() {
                    Ok(paging) => images.retain(|i| i.paging == paging),
                    Err(why) => {
                        ambiguous.get_or_insert(FindError::AmbiguousPaging { dtb: root, why });
                        continue;
                    }
                }
            }
            if let Some(image) = images.pop() {
                found = Some(image);
                break;
            }
        }
        if found.is_some() {
            break;
        }
    }
    if let (None, Some(ambiguous)) = (&found, ambiguous) {
        return Err(ambiguous);
    }
    let Some(image) = found else {
        return Err(FindError::NotLinux(format!(
            "{} candidate top-level table(s) ({}), none maps a kernel image at {KERNEL_MAP:#x} and up",
            roots.len(),
            roots.iter().map(|r| format!("{r:#x}")).collect::<Vec<_>>().join(", ")
        )));
    };
    let rodata = image.rodata().ok_or_else(|| {
        FindError::NotLinux(format!(
            "the image at {:#x} has no read-only data after its text",
            image.virtual_base
        ))
    })?;
    // Read through the image's own physical layout: it is contiguous, and
    // a read by physical address needs no page walk.
    let mut bytes = vec![0u8; rodata.len as usize];
    if let Err(e) = mem.read(rodata.pa, &mut bytes).await {
        e.zero_fill(&mut bytes);
    }
    let in_rodata = |va: u64, len: u64| {
        let start = va.checked_sub(rodata.va)? as usize;
        bytes.get(start..start.checked_add(len as usize)?)
    };
    let found = kallsyms::find(&bytes, image.virtual_base, SYMBOLS)
        .ok_or(FindError::NoSymbols(rodata.va))?;
    let symbols: BTreeMap<String, u64> = found.addresses.into_iter().collect();
    let banner = symbols
        .get("linux_banner")
        .and_then(|&va| banner_at(bytes.get(va.checked_sub(rodata.va)? as usize..)?))
        .or_else(|| find_banner(&bytes).map(|(_, b)| b))
        .ok_or_else(|| {
            FindError::NotLinux("no \"Linux version\" banner in the read-only data".into())
        })?;
    let build_id = match (symbols.get("__start_notes"), symbols.get("__stop_notes")) {
        (Some(&start), Some(&stop)) if stop > start => {
            in_rodata(start, stop - start).and_then(|notes| build_id_note(notes, start))
        }
        _ => None,
    };
    let (btf, btf_location) = rodata_btf(&bytes, rodata.va, &symbols, hints)?;
    drop(bytes);
    let mut kernel = finish(
        mem,
        image,
        btf,
        btf_location,
        symbols,
        banner,
        Source::Search,
    )
    .await?;
    kernel.build_id = build_id;
    Ok(kernel)
}

/// The kernel's BTF: between `__start_BTF` and `__stop_BTF`, else wherever
/// a header is found in `rodata` (at `rodata_va`), else the user's file.
/// A kernel with neither symbols nor header has none; one whose BTF fails
/// the checks says so, naming each place tried once.
fn rodata_btf(
    rodata: &[u8],
    rodata_va: u64,
    symbols: &BTreeMap<String, u64>,
    hints: &Hints,
) -> Result<(Btf, Option<(u64, u64)>), FindError> {
    let in_rodata = |va: u64, len: u64| {
        let start = usize::try_from(va.checked_sub(rodata_va)?).ok()?;
        rodata.get(start..start.checked_add(usize::try_from(len).ok()?)?)
    };
    let named = match (symbols.get("__start_BTF"), symbols.get("__stop_BTF")) {
        (Some(&start), Some(&stop)) if stop > start => Some(start),
        _ => None,
    };
    // The named place (whatever it holds), then headers found elsewhere.
    let mut places: Vec<u64> = named.into_iter().collect();
    for (at, _) in btf::find_headers(rodata) {
        let va = rodata_va + at as u64;
        if places.len() >= 4 {
            break;
        }
        if !places.contains(&va) {
            places.push(va);
        }
    }
    let mut tried = Vec::new();
    for &va in &places {
        let blob = match (Some(va) == named, named) {
            (true, _) => in_rodata(va, symbols["__stop_BTF"] - va),
            _ => in_rodata(va, rodata.len() as u64 - (va - rodata_va)),
        };
        let Some(blob) = blob else {
            tried.push(format!("{va:#x}: outside the read-only data"));
            continue;
        };
        match Btf::parse(blob) {
            Ok(btf) => {
                let len = btf.len() as u64;
                return Ok((btf, Some((va, len))));
            }
            Err(e) => tried.push(format!("{va:#x}: {e}")),
        }
    }
    if let Some(file) = &hints.btf_file {
        return Ok((Btf::from_file(file)?, None));
    }
    match tried.is_empty() {
        true => Err(FindError::NoBtf(format!(
            "no __start_BTF symbol and no BTF header in its {} bytes of read-only data",
            rodata.len()
        ))),
        false => Err(FindError::BadBtf(tried.join("; "))),
    }
}

/// Checks `init_task` and what it leads to, and settles the kernel's own
/// top table and the direct map: two batches of reads, as every address
/// read is in the image (read by its physical address) or in the direct
/// map (whose candidate bases are checked by the pointers read through
/// them).
pub(super) async fn finish(
    mem: &Memory,
    image: Image,
    btf: Btf,
    btf_location: Option<(u64, u64)>,
    mut symbols: BTreeMap<String, u64>,
    banner: String,
    source: Source,
) -> Result<Kernel, FindError> {
    let offsets = Offsets::from_btf(&btf)?;
    let layout = offsets.init_task;
    let inconsistent = FindError::Inconsistent;
    let init_task = *symbols
        .get("init_task")
        .ok_or_else(|| inconsistent("kallsyms has no init_task".into()))?;
    let in_image = |name: &str| symbols.get(name).and_then(|&va| image.physical(va));
    // The kernel's own top table (`init_top_pgt`), which must map the image
    // as the table it was found through does; without the symbol, that
    // table (which shares the kernel half).
    let top = in_image("init_top_pgt");
    let offset_base = in_image("page_offset_base");
    let l5 = in_image(L5_SYMBOL);
    let (task, top_entry, offset_base, l5) = futures::join!(
        init_task::read(mem, &image, &layout, init_task),
        async {
            match top {
                Some(pa) => mem.read_val::<u64>(pa + 511 * 8).await.ok(),
                None => None,
            }
        },
        async {
            match offset_base {
                Some(pa) => mem.read_val::<u64>(pa).await.ok(),
                None => None,
            }
        },
        async {
            match l5 {
                Some(pa) => Some(mem.read_val::<u32>(pa).await),
                None => None,
            }
        }
    );
    // The kernel's own word on its mode, where it keeps one: the tables
    // were read in a mode it must agree with.
    match l5 {
        Some(Ok(l5)) if (l5 == 1) != (image.paging == Paging::FiveLevel) || l5 > 1 => {
            return Err(inconsistent(format!(
                "its tables read as {} paging, and {L5_SYMBOL} is {l5}",
                image.paging
            )))
        }
        Some(Err(e)) => {
            return Err(inconsistent(format!("{L5_SYMBOL} is unreadable: {e}")));
        }
        _ => {}
    }
    let dtb = match top {
        Some(pa) if top_entry == Some(image.top_entry) => pa,
        Some(pa) => {
            return Err(inconsistent(format!(
                "init_top_pgt at {pa:#x} does not map the kernel image as the table at {:#x} does",
                image.root
            )))
        }
        None => image.root,
    };
    let paging = image.paging;
    let bases: Vec<u64> = [offset_base, Some(default_direct_map(paging))]
        .into_iter()
        .flatten()
        .filter(|base| base % GIB == 0 && *base >= paging.upper_half())
        .collect();
    let task = task.map_err(inconsistent)?;
    let init_thread_pid = task.as_slice().u64_at(layout.thread_pid).unwrap_or(0);
    let (task, direct_map_base) =
        init_task::check(mem, &image, &layout, (init_task, &task), &bases)
            .await
            .map_err(inconsistent)?;
    if let Some(&ns) = symbols.get("init_pid_ns") {
        if ns != task.pid_ns {
            return Err(inconsistent(format!(
                "init_task's pid namespace is {:#x}, kallsyms' init_pid_ns {ns:#x}",
                task.pid_ns
            )));
        }
    }
    symbols.insert("init_pid_ns".into(), task.pid_ns);
    Ok(Kernel {
        space: AddressSpace::new(mem.clone(), dtb, paging),
        image: Image { root: dtb, ..image },
        direct_map_base,
        btf,
        btf_location,
        symbols,
        banner,
        init_task: task,
        source,
        offsets,
        build_id: None,
        init_thread_pid,
    })
}
