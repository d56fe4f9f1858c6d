//! The `leechcore` plugin as a memflow tool loads it: one `Inventory` per
//! test process over the release build folder, with the plugin's log lines
//! captured.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use memflow::cglue::{CTup2, CTup3};
use memflow::prelude::v1::*;

use super::qemu::oracle::{GuestMap, MODULE_SYMBOLS};
use super::qemu::Guest;
use super::Image;

/// Log lines the plugin sent to the host.
pub static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        // Called from inside the plugin: must not panic.
        LOG.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
            "{} {}",
            record.level(),
            record.args()
        ));
    }
    fn flush(&self) {}
}

pub fn plugin_dir() -> PathBuf {
    let dir = super::release::release_dir(&super::repo_root(), "memflow-leechcore");
    assert!(
        dir.join("libmemflow_leechcore.so").exists(),
        "{}/libmemflow_leechcore.so is missing: build it with `make plugin`",
        dir.display()
    );
    dir
}

/// One inventory per test process, as a memflow tool has.
pub fn inventory() -> std::sync::MutexGuard<'static, Inventory> {
    static INVENTORY: OnceLock<Mutex<Inventory>> = OnceLock::new();
    INVENTORY
        .get_or_init(|| {
            let _ = log::set_logger(&Capture);
            log::set_max_level(log::LevelFilter::Info);
            let mut inventory = Inventory::empty();
            inventory
                .add_dir(plugin_dir())
                .expect("load the plugin folder");
            Mutex::new(inventory)
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Connects as a memflow tool does for `-c leechcore:ARGS`: memflow parses
/// the part after the connector's name.
pub fn connect(chain: &str) -> Result<ConnectorInstanceArcBox<'static>> {
    let args: ConnectorArgs = chain
        .strip_prefix("leechcore:")
        .expect("leechcore:…")
        .parse()?;
    inventory().instantiate_connector("leechcore", None, Some(&args))
}

/// The arguments for `image` with the memory map file `map`.
pub fn with_map(image: &Image, map: &std::path::Path) -> String {
    format!("leechcore:\"{}\":memmap={}", image.device(), map.display())
}

/// The error of a connection that must fail.
pub fn refused(args: &str) -> Error {
    match connect(args) {
        Ok(_) => panic!("`{args}` was accepted"),
        Err(e) => e,
    }
}

pub fn connect_with_cache(chain: &str, cache: bool) -> ConnectorInstanceArcBox<'static> {
    let mut args: ConnectorArgs = chain
        .strip_prefix("leechcore:")
        .expect("leechcore:…")
        .parse()
        .unwrap();
    args.middleware_args = ConnectorMiddlewareArgs::new().cache(cache);
    inventory()
        .instantiate_connector("leechcore", None, Some(&args))
        .unwrap()
}

/// Runs of bytes as (meta address, length).
pub type Runs = Vec<(u64, usize)>;

/// The runs of bytes a read of `items` by `read` (given memflow's
/// `MemOps` as `ops`) reports through `out` and through `out_fail`, each as
/// (meta address, length).
macro_rules! split_runs {
    ($items:expr, |$ops:ident| $read:expr) => {{
        let (mut ok, mut failed): (Runs, Runs) = (Vec::new(), Vec::new());
        let mut on_ok = |CTup2(a, d): ReadData| {
            ok.push((a.to_umem(), d.len()));
            true
        };
        let mut on_fail = |CTup2(a, d): ReadData| {
            failed.push((a.to_umem(), d.len()));
            true
        };
        MemOps::with_raw(
            $items.into_iter(),
            Some(&mut (&mut on_ok).into()),
            Some(&mut (&mut on_fail).into()),
            |$ops| $read,
        )
        .unwrap();
        (ok, failed)
    }};
}

/// Reads through `phys_read_raw_iter`, returning the bytes reported
/// through `out` and through `out_fail`, each as (meta address, length).
pub fn read_split(
    conn: &mut ConnectorInstanceArcBox<'static>,
    addr: u64,
    buf: &mut [u8],
) -> (Runs, Runs) {
    let meta = Address::from(0x5000_0000u64);
    let items = [CTup3(PhysicalAddress::from(addr), meta, buf.into())];
    split_runs!(items, |ops| conn.phys_read_raw_iter(ops))
}

/// Reads through a memory view's `read_raw_iter`, returning the bytes
/// reported through `out` and through `out_fail`, each as (offset in
/// `buf`, length).
pub fn view_read_split(view: &mut impl MemoryView, va: u64, buf: &mut [u8]) -> (Runs, Runs) {
    let items = [CTup3(Address::from(va), Address::null(), buf.into())];
    split_runs!(items, |ops| view.read_raw_iter(ops))
}

/// A process's VMAs as `/proc/PID/maps` shows them, as memflow's ranges
/// of page types: touching ones of one type merged, the vsyscall page (no
/// VMA: /proc adds it) left out.
pub fn page_ranges(maps: &[GuestMap]) -> Vec<(u64, u64, PageType)> {
    let mut ranges: Vec<(u64, u64, PageType)> = Vec::new();
    for m in maps.iter().filter(|m| m.path != "[vsyscall]") {
        let mut kind = match m.perms.as_bytes()[1] {
            b'w' => PageType::WRITEABLE,
            _ => PageType::READ_ONLY,
        };
        if m.perms.as_bytes()[2] != b'x' {
            kind |= PageType::NOEXEC;
        }
        match ranges.last_mut() {
            Some(last) if last.1 == m.start && last.2 == kind => last.1 = m.end,
            _ => ranges.push((m.start, m.end, kind)),
        }
    }
    ranges
}

/// The files a process maps, each from its lowest mapping to the end of
/// its highest (path, start, end), in address order.
pub fn mapped_files(maps: &[GuestMap]) -> Vec<(String, u64, u64)> {
    let mut files: Vec<(String, u64, u64)> = Vec::new();
    for m in maps.iter().filter(|m| m.path.starts_with('/')) {
        match files.iter_mut().find(|f| f.0 == m.path) {
            Some(f) => {
                f.1 = f.1.min(m.start);
                f.2 = f.2.max(m.end);
            }
            None => files.push((m.path.clone(), m.start, m.end)),
        }
    }
    files.sort_by_key(|f| f.1);
    files
}

/// Whether the plugin logged a line holding `needle`.
pub fn logged(needle: &str) -> bool {
    LOG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|l| l.contains(needle))
}

/// Refuses `args` with an error of `kind` and a logged line holding `needle`.
pub fn assert_refused(args: &str, kind: ErrorKind, needle: &str) {
    let err = refused(args);
    assert_eq!(err.1, kind, "`{args}`");
    assert!(
        logged(needle),
        "`{args}`: no log line holds {needle:?}: {:?}",
        LOG.lock().unwrap_or_else(|e| e.into_inner())
    );
}

/// Checks an OS's kernel exports (`offset_of` gives a symbol's offset from
/// `_text`) against every kernel-image symbol the guest printed from its
/// `/proc/kallsyms`.
pub fn check_kernel_symbols(guest: &Guest, offset_of: impl Fn(&str) -> Option<u64>) {
    let text = guest.symbol("_text");
    for s in guest
        .oracle()
        .symbols
        .iter()
        .filter(|s| !MODULE_SYMBOLS.contains(&s.name.as_str()))
    {
        assert_eq!(
            offset_of(&s.name).map(|o| text.wrapping_add(o)),
            Some(s.address),
            "{}",
            s.name
        );
    }
}
