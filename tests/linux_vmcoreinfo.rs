//! The kernel's own VMCOREINFO read from a live guest and from images of
//! it, against the ELF note the guest's kernel builds from the same text
//! (its address from the guest's `/sys/kernel/vmcoreinfo`, its bytes from
//! QEMU's monitor), and refused by cause when memory does not hold it.

mod common;

use std::path::Path;

use common::linux::no_cache;
use common::qemu::{shared_guest, shared_la57_guest, Guest};
use leechio::linux::{Kernel, VmcoreinfoError};
use leechio::{DeviceConfig, LeechCore, Memory};

/// `__START_KERNEL`: where `_text` is without KASLR; `KERNELOFFSET` is the
/// distance from it (`kaslr_offset()`).
const START_KERNEL: u64 = 0xffff_ffff_8100_0000;

/// The text the guest's kernel put in its own note.
fn guests_own_text(guest: &Guest) -> String {
    String::from_utf8(guest.vmcoreinfo()).unwrap()
}

/// The value of the `KEY=` line of `text`.
fn line<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= line in {text}"))
}

fn image(dir: &Path, name: &str, bytes: &[u8]) -> Memory {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let device = LeechCore::open(&DeviceConfig::new(format!("file://{}", path.display()))).unwrap();
    Memory::new(device)
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn vmcoreinfo_is_the_text_of_the_guests_own_note() {
    let guest = shared_guest();
    let mem = Memory::new(guest.open());
    let _paused = guest.pause();
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let text = kernel.vmcoreinfo().unwrap();
    assert_eq!(text, guests_own_text(&guest));
    // What it says, against what the guest says of itself.
    let release = guest.kernel_version().split_whitespace().nth(2).unwrap();
    assert_eq!(line(&text, "OSRELEASE"), release);
    assert_eq!(line(&text, "PAGESIZE"), "4096");
    assert_eq!(
        line(&text, "KERNELOFFSET"),
        format!("{:x}", guest.kernel_text() - START_KERNEL)
    );
    assert_eq!(
        kernel.symbol("vmcoreinfo_data"),
        Some(guest.symbol("vmcoreinfo_data"))
    );
    assert_eq!(
        kernel.symbol("vmcoreinfo_size"),
        Some(guest.symbol("vmcoreinfo_size"))
    );
}

/// The checks against the kernel found pass on a kernel with KASLR and
/// 5-level paging: its text, whole, with the offset and the mode the
/// guest has.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
#[cfg_attr(miri, ignore)]
fn vmcoreinfo_of_a_5_level_guest_with_kaslr_agrees_with_the_kernel() {
    let guest = shared_la57_guest();
    let mem = Memory::new(guest.open());
    let _paused = guest.pause();
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let text = kernel.vmcoreinfo().unwrap();
    assert_eq!(text, guests_own_text(&guest));
    assert_eq!(line(&text, "NUMBER(pgtable_l5_enabled)"), "1");
    assert_eq!(
        line(&text, "KERNELOFFSET"),
        format!("{:x}", guest.kernel_text() - START_KERNEL)
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn memory_without_the_kernels_vmcoreinfo_says_why() {
    let guest = shared_guest();
    let dir = tempfile::tempdir().unwrap();
    let bytes = {
        let _paused = guest.pause();
        guest.pmemsave(0, guest.memory().bytes())
    };
    let mem = image(dir.path(), "guest.raw", &bytes);
    let kernel = Kernel::find(&mem, &no_cache()).unwrap();
    let text = kernel.vmcoreinfo().unwrap();
    assert_eq!(text, guests_own_text(&guest));
    let pa = |va: u64| (va - kernel.virtual_base() + kernel.physical_base()) as usize;
    let data_at = pa(guest.symbol("vmcoreinfo_data"));
    let size_at = pa(guest.symbol("vmcoreinfo_size"));
    let data = u64::from_le_bytes(bytes[data_at..data_at + 8].try_into().unwrap());
    let text_at = (data - kernel.direct_map_base()) as usize;
    // Each image is the guest's with one thing changed, and the kernel
    // found again in it (the same kernel, the same symbols: finding it
    // does not read VMCOREINFO) reads it.
    let changed = |name: &str, at: usize, new: &[u8]| {
        let mut copy = bytes.clone();
        copy[at..at + new.len()].copy_from_slice(new);
        let mem = image(dir.path(), name, &copy);
        let changed = Kernel::find(&mem, &no_cache()).unwrap();
        assert_eq!(changed.virtual_base(), kernel.virtual_base());
        changed.vmcoreinfo().unwrap_err()
    };
    assert_eq!(
        changed("null.raw", data_at, &0u64.to_le_bytes()).to_string(),
        format!(
            "VMCOREINFO at {:#x} is not valid: vmcoreinfo_data is NULL (the kernel could not allocate it)",
            guest.symbol("vmcoreinfo_data")
        )
    );
    assert_eq!(
        changed("big.raw", size_at, &4097u64.to_le_bytes()).to_string(),
        format!(
            "VMCOREINFO at {data:#x} is not valid: vmcoreinfo_size is 4097, not 1 to 4096 bytes"
        )
    );
    let release = kernel.release();
    assert_eq!(
        changed("other.raw", text_at + 10, b"9").to_string(),
        format!(
            "VMCOREINFO at {data:#x} is not valid: it starts with \"OSRELEASE=9{}\", not \"OSRELEASE={release}\"",
            &release[1..]
        )
    );
    // Past the end of RAM: the read fails and says where.
    let outside = kernel.direct_map_base() + (1 << 40);
    assert!(matches!(
        changed("outside.raw", data_at, &outside.to_le_bytes()),
        VmcoreinfoError::Unreadable(why) if why.starts_with(&format!("{outside:#x}.."))
    ));
}
