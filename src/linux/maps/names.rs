//! Step 4 of reading a process's maps: what backs each VMA, the paths of
//! its files (see `paths`), the names of special mappings and of named
//! anonymous memory.

use std::collections::HashMap;

use super::{MapsFailure, Symbols, Vma, NAME_MAX};
use crate::linux::kmem::{Fields, KernelMemory};
use crate::linux::offsets::MapsLayout;
use crate::linux::paths;

/// Fills in what backs each VMA: the paths, inodes and devices of the
/// files, the names of special mappings and of named anonymous memory.
pub(super) async fn name_vmas(
    kmem: &KernelMemory<'_>,
    layout: &MapsLayout,
    vmas: &mut [Vma],
    bytes_of: &HashMap<u64, &Vec<u8>>,
    symbols: &Symbols,
    failed: &mut Vec<MapsFailure>,
) {
    let field = |vma: &Vma, at: u64| bytes_of[&vma.address].u64_at(at).unwrap_or(0);
    let files: Vec<u64> = vmas.iter().map(|v| v.file_address).collect();
    let mut unique: Vec<u64> = files.iter().copied().filter(|&f| f != 0).collect();
    unique.sort_unstable();
    unique.dedup();
    // Without a file: a special mapping names itself through its
    // operations (`special_mapping_name` gives `vm_special_mapping.name`).
    let specials: Vec<(usize, u64, u64)> = vmas
        .iter()
        .enumerate()
        .filter(|(i, v)| files[*i] == 0 && field(v, layout.vm_ops) != 0)
        .map(|(i, v)| (i, field(v, layout.vm_ops), field(v, layout.vm_private_data)))
        .collect();
    let anon: Vec<(usize, u64)> = match layout.anon_name {
        Some((at, name)) => vmas
            .iter()
            .enumerate()
            .filter(|(i, v)| files[*i] == 0 && field(v, at) != 0)
            .map(|(i, v)| (i, field(v, at) + name))
            .collect(),
        None => Vec::new(),
    };
    let (mut found, special_names, anon_names) = futures::join!(
        paths::files(kmem, &layout.paths, &symbols.dnames, &unique),
        special_names(kmem, layout, &specials, symbols.special),
        futures::future::join_all(anon.iter().map(|&(_, at)| kmem.read_vec(at, NAME_MAX)))
    );
    for (vma, file) in vmas.iter_mut().zip(&files) {
        let Some(info) = found.get_mut(file) else {
            continue;
        };
        vma.inode = info.inode;
        vma.device = info.device;
        match &info.path {
            Ok(path) => vma.file = Some(path.clone()),
            Err(why) => failed.push(MapsFailure::new(
                *file,
                format!("the file of VMA {:#x}-{:#x}: {why}", vma.start, vma.end),
            )),
        }
        if info.cut {
            failed.push(MapsFailure::new(
                *file,
                format!(
                    "the path of the file of VMA {:#x}-{:#x} is longer than PATH_MAX (4096 bytes): only its last components are shown, after \"{}\"",
                    vma.start,
                    vma.end,
                    paths::CUT_MARK
                ),
            ));
        }
    }
    for ((i, ..), name) in specials.iter().zip(special_names) {
        vmas[*i].name = name;
    }
    for ((i, _), name) in anon.iter().zip(anon_names) {
        if vmas[*i].name.is_none() {
            vmas[*i].name = name
                .ok()
                .and_then(|b| c_string(&b))
                .map(|n| format!("[anon:{n}]"));
        }
    }
}

/// The names of the special mappings in `specials` (index, `vm_ops`,
/// `vm_private_data`): `vm_ops->name` and the mapping's name pointer are
/// read together, then the names whose `vm_ops->name` is
/// `special_mapping_name`.
async fn special_names(
    kmem: &KernelMemory<'_>,
    layout: &MapsLayout,
    specials: &[(usize, u64, u64)],
    special: Option<u64>,
) -> Vec<Option<String>> {
    let Some(special) = special else {
        return vec![None; specials.len()];
    };
    let first = specials.iter().map(|&(_, ops, private)| async move {
        let (name_fn, name) = futures::join!(
            kmem.read_vec(ops + layout.ops_name, 8),
            kmem.read_vec(private + layout.special_name, 8)
        );
        let name_fn = name_fn.ok()?.u64_at(0)?;
        (name_fn == special && private != 0).then_some(())?;
        let name = name.ok()?.u64_at(0)?;
        c_string(&kmem.read_vec(name, 32).await.ok()?)
    });
    futures::future::join_all(first).await
}

/// The NUL-terminated string at the start of `bytes` (all of it without a
/// NUL), if it is UTF-8 without control characters.
fn c_string(bytes: &[u8]) -> Option<String> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    (!text.chars().any(char::is_control)).then(|| text.to_string())
}
