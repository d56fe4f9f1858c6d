//! A warm start: with the kernel cache, finding the kernel of an image of
//! the guest costs one read call and `ps` eleven more, and no byte of the
//! kernel's BTF is read (every read the device gets is recorded); a kernel
//! that is not the one the cache knows (another build ID), or an entry
//! whose kept answers disagree with memory, is not served warm.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::qemu::shared_guest;
use leechio::linux::{CacheLocation, Hints, Kernel, Source};
use leechio::{
    Backend, DeviceConfig, EngineConfig, LeechCore, Limits, Memory, MemoryMap, PageError,
    ScatterEntry, WriteEntry,
};

/// Read calls of the process list once the kernel is known, on a guest
/// whose pids stay under 4,096 (tests/linux_processes.rs).
const LIST_CALLS: usize = 11;
/// Read calls of a warm find: one batch.
const WARM_CALLS: usize = 1;

/// A device that records every read call: the (address, length) of each
/// entry.
struct Recorder {
    inner: LeechCore,
    calls: Mutex<Vec<Vec<(u64, usize)>>>,
}

impl Recorder {
    fn take(&self) -> Vec<Vec<(u64, usize)>> {
        std::mem::take(&mut self.calls.lock().unwrap())
    }

    fn record(&self, entries: &[ScatterEntry<'_>]) {
        let call = entries.iter().map(|e| (e.addr, e.buf.len())).collect();
        self.calls.lock().unwrap().push(call);
    }
}

impl Backend for Recorder {
    fn read_scatter(&self, entries: &mut [ScatterEntry<'_>]) {
        self.record(entries);
        Backend::read_scatter(&self.inner, entries)
    }
    fn read_scatter_checked(&self, entries: &mut [ScatterEntry<'_>]) {
        self.record(entries);
        Backend::read_scatter_checked(&self.inner, entries)
    }
    fn write_scatter(&self, entries: &mut [WriteEntry<'_>]) {
        Backend::write_scatter(&self.inner, entries)
    }
    fn limits(&self) -> Limits {
        Backend::limits(&self.inner)
    }
    fn max_address(&self) -> u64 {
        Backend::max_address(&self.inner)
    }
    fn memory_map(&self) -> MemoryMap {
        Backend::memory_map(&self.inner)
    }
    fn read_only(&self) -> bool {
        Backend::read_only(&self.inner)
    }
    fn prefers_address_order(&self) -> bool {
        Backend::prefers_address_order(&self.inner)
    }
    fn check_target(&self) -> Result<(), PageError> {
        Backend::check_target(&self.inner)
    }
}

/// An engine over the image at `path`, every read recorded.
fn recorded(path: &Path) -> (Memory, Arc<Recorder>) {
    let inner = LeechCore::open(&DeviceConfig::new(format!("file://{}", path.display()))).unwrap();
    let recorder = Arc::new(Recorder {
        inner,
        calls: Mutex::new(Vec::new()),
    });
    let mem = Memory::with_config(recorder.clone(), EngineConfig::default());
    (mem, recorder)
}

/// The pids and names of a list.
fn rows(kernel: &Kernel) -> Vec<(u32, String)> {
    let list = kernel.processes();
    assert!(list.failed.is_empty(), "{:?}", list.failed);
    list.processes
        .iter()
        .map(|p| (p.pid, p.name.clone()))
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn a_warm_ps_takes_twelve_calls_and_reads_no_btf() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let bytes = {
        let _paused = guest.pause();
        guest.pmemsave(0, guest.memory().bytes())
    };
    let image = dir.path().join("guest.raw");
    std::fs::write(&image, &bytes).unwrap();
    let hints = Hints {
        cache: CacheLocation::Folder(dir.path().join("cache")),
        ..Hints::default()
    };
    let (mem, device) = recorded(&image);
    let cold = Kernel::find(&mem, &hints).unwrap();
    assert_eq!(cold.source(), Source::Search);
    let cold_rows = rows(&cold);
    // The guest's own processes, as its /proc listed them at boot.
    let oracle: Vec<u32> = guest.processes().iter().map(|t| t.pid).collect();
    assert!(oracle
        .iter()
        .all(|pid| cold_rows.iter().any(|(p, _)| p == pid)));
    let (btf_va, btf_len) = cold.btf_location().unwrap();
    let btf_pa = btf_va - cold.virtual_base() + cold.physical_base();
    let btf_range = btf_pa..btf_pa + btf_len;
    drop(device.take());

    let warm = Kernel::find(&mem, &hints).unwrap();
    let find_calls = device.take();
    assert_eq!(warm.source(), Source::Cache);
    let warm_rows = rows(&warm);
    let list_calls = device.take();
    assert_eq!(warm_rows, cold_rows);
    assert_eq!(
        (find_calls.len(), list_calls.len()),
        (WARM_CALLS, LIST_CALLS),
        "{find_calls:x?}"
    );
    let btf_reads: Vec<&(u64, usize)> = find_calls
        .iter()
        .chain(&list_calls)
        .flatten()
        .filter(|(addr, len)| *addr < btf_range.end && addr + *len as u64 > btf_range.start)
        .collect();
    assert!(btf_reads.is_empty(), "BTF read: {btf_reads:x?}");
    assert!(!warm.btf().is_parsed());
    // What the walks asked, the same as the BTF said.
    for (ty, member) in [
        ("task_struct", "comm"),
        ("task_struct", "pid"),
        ("mm_struct", "pgd"),
    ] {
        assert_eq!(warm.offset_of(ty, member), cold.offset_of(ty, member));
    }
    assert_eq!(warm.init_task(), cold.init_task());
    assert_eq!(warm.direct_map_base(), cold.direct_map_base());
    assert_eq!(warm.dtb(), cold.dtb());
    // A question no walk asks reads the BTF after all, and is answered.
    assert_eq!(
        warm.btf().size_of("pid_namespace"),
        cold.btf().size_of("pid_namespace")
    );
    assert!(warm.btf().is_parsed());
    // One call, reading the BTF (as the engine aligns reads) and nothing
    // else.
    let reads = device.take();
    assert_eq!(reads.len(), 1);
    let start = reads[0].iter().map(|r| r.0).min().unwrap();
    let end = reads[0].iter().map(|r| r.0 + r.1 as u64).max().unwrap();
    let read: u64 = reads[0].iter().map(|r| r.1 as u64).sum();
    assert!(start <= btf_range.start && end >= btf_range.end && read == end - start);
    assert!(end - start < btf_len + 16, "{start:#x}..{end:#x}");

    // Kept answers that disagree with memory (comm 8 bytes on): not
    // warm; the kernel is checked the slow way, with its BTF read, and
    // the entry written again.
    let file = hints.cache.file().unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let comm = cold.offset_of("task_struct", "comm").unwrap();
    let key = format!("\"offset task_struct comm\": {comm}");
    assert!(text.contains(&key), "{text}");
    std::fs::write(
        &file,
        text.replace(&key, &format!("\"offset task_struct comm\": {}", comm + 8)),
    )
    .unwrap();
    let checked = Kernel::find(&mem, &hints).unwrap();
    assert_eq!(checked.source(), Source::Cache);
    assert!(checked.btf().is_parsed());
    assert_eq!(checked.offset_of("task_struct", "comm"), Ok(comm));
    drop(device.take());
    let again = Kernel::find(&mem, &hints).unwrap();
    assert_eq!(
        (again.source(), device.take().len()),
        (Source::Cache, WARM_CALLS)
    );
    // Answers past the cap (a cache file made to make a walk allocate):
    // the entry is not used warm.
    let text = std::fs::read_to_string(&file).unwrap();
    let size = cold.btf().size_of("task_struct").unwrap();
    let key = format!("\"size task_struct\": {size}");
    assert!(text.contains(&key), "{text}");
    std::fs::write(
        &file,
        text.replace(&key, "\"size task_struct\": 4294967296"),
    )
    .unwrap();
    let checked = Kernel::find(&mem, &hints).unwrap();
    assert!(device.take().len() > WARM_CALLS);
    assert_eq!(checked.btf().size_of("task_struct"), Ok(size));

    // An entry naming a BTF of 256 MiB: not read (no call reads more
    // than a kernel's BTF can be); the kernel is searched for.
    let text = std::fs::read_to_string(&file).unwrap();
    let len = format!("\"{btf_len:#x}\"");
    assert!(text.contains(&len), "{text}");
    std::fs::write(&file, text.replace(&len, "\"0x10000000\"")).unwrap();
    drop(device.take());
    assert_eq!(Kernel::find(&mem, &hints).unwrap().source(), Source::Search);
    let largest = device
        .take()
        .iter()
        .map(|c| c.iter().map(|r| r.1).sum::<usize>())
        .max();
    assert!(largest < Some(64 << 20), "{largest:?}");

    // Another build under the same banner (its build ID changed): not
    // the kernel the cache knows; searched again.
    let (note_va, note) = {
        let text = std::fs::read_to_string(&file).unwrap();
        let entries: serde_json::Value = serde_json::from_str(&text).unwrap();
        let build_id = &entries[0]["warm"]["build_id"];
        let va = u64::from_str_radix(build_id[0].as_str().unwrap().trim_start_matches("0x"), 16)
            .unwrap();
        (va, build_id[1].as_str().unwrap().to_string())
    };
    // A SHA-1 build ID: 4-byte name size, 20-byte descriptor, type 3, "GNU".
    assert!(
        note.starts_with("040000001400000003000000474e5500"),
        "{note}"
    );
    let note_pa = (note_va - cold.virtual_base() + cold.physical_base()) as usize;
    let mut rebuilt = bytes;
    rebuilt[note_pa + 16] ^= 0xff;
    let other = dir.path().join("rebuilt.raw");
    std::fs::write(&other, &rebuilt).unwrap();
    let (mem, _) = recorded(&other);
    let kernel = Kernel::find(&mem, &hints).unwrap();
    assert_eq!(kernel.source(), Source::Search);
    assert_eq!(kernel.init_task(), cold.init_task());
    assert!(kernel.btf().is_parsed());
}
