//! drgn (from PyPI, installed by `make setup` in `target/drgn/`) on a
//! `leechio dump` of a live guest's physical memory, booted with KASLR:
//! the dump's VMCOREINFO note is what makes drgn take the file for a
//! Linux kernel's core, and what it reads memory through (physical
//! addresses, and virtual ones by its own walk of the kernel's page
//! tables, which KERNELOFFSET and the symbols in the note locate). The
//! guest's own answers come from QEMU's monitor and its `/proc`.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::elf_tools::notes;
use common::qemu::{Guest, GuestKernel, GuestMemory, GuestOptions};
use serde_json::Value;

/// How long one run of the binary or of drgn may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// `__START_KERNEL`: `_text` without KASLR; KERNELOFFSET is the distance.
const START_KERNEL: u64 = 0xffff_ffff_8100_0000;

fn leechio(args: &[&str]) -> Output {
    common::output_within(
        Command::new(env!("CARGO_BIN_EXE_leechio"))
            .args(args)
            .env_remove("LEECHIO_DEVICE"),
        RUN_LIMIT,
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The Python of the venv `make setup` installs drgn in.
fn drgn_python() -> PathBuf {
    let python = common::repo_root().join("target/drgn/bin/python");
    let installed = Command::new(&python)
        .args(["-c", "import drgn"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        installed,
        "drgn is not installed in {}: run `make setup` (it installs drgn from PyPI there)",
        python.display()
    );
    python
}

/// What drgn says of the core `path`: its flags, and the bytes it reads
/// at each physical address of `physical` and virtual one of `virtual_`
/// (hex, or the error it gives), as JSON.
fn drgn(python: &Path, path: &Path, physical: &[(u64, usize)], virtual_: &[(u64, usize)]) -> Value {
    const SCRIPT: &str = r#"
import json, sys
import drgn

path, physical, virtual = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
prog = drgn.Program()
prog.set_core_dump(path)

def read(address, size, physical):
    try:
        return prog.read(address, size, physical).hex()
    except drgn.FaultError as e:
        return "fault: " + str(e)

print(json.dumps({
    "version": drgn.__version__,
    "linux_kernel": bool(prog.flags & drgn.ProgramFlags.IS_LINUX_KERNEL),
    "physical": [read(a, n, True) for a, n in physical],
    "virtual": [read(a, n, False) for a, n in virtual],
}))
"#;
    let list = |l: &[(u64, usize)]| serde_json::to_string(l).unwrap();
    let output = common::output_within(
        Command::new(python)
            .args(["-c", SCRIPT])
            .arg(path)
            .args([list(physical), list(virtual_)]),
        RUN_LIMIT,
    );
    assert!(
        output.status.success(),
        "drgn on {}: {}",
        path.display(),
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn hex_bytes(v: &Value) -> Vec<u8> {
    let s = v.as_str().unwrap();
    (0..s.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&s[at..at + 2], 16).unwrap_or_else(|_| panic!("{s}")))
        .collect()
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn drgn_opens_a_physical_dump_as_a_kernel_core_through_its_vmcoreinfo_note() {
    let guest = Guest::start_with(GuestOptions {
        memory: GuestMemory::Mib256,
        kaslr: true,
        kernel: GuestKernel::Default,
        ..GuestOptions::default()
    });
    drgn_opens_a_physical_dump_of(&guest);
}

/// The same on a CPU with 5-level paging on: drgn walks the 5-level tables
/// itself (the note says `pgtable_l5_enabled`), and the direct map the
/// segments sit at is the 5-level one.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn with_5_level_paging_drgn_opens_a_physical_dump_as_a_kernel_core() {
    let guest = common::qemu::shared_la57_guest();
    drgn_opens_a_physical_dump_of(&guest);
    let note = text(&guest.vmcoreinfo());
    assert!(note.contains("NUMBER(pgtable_l5_enabled)=1"), "{note}");
}

fn drgn_opens_a_physical_dump_of(guest: &Guest) {
    let python = drgn_python();
    let dir = tempfile::tempdir().unwrap();
    let device = guest.device_string();
    let _paused = guest.pause();
    let dump = |name: &str, args: &[&str]| {
        let path = dir.path().join(name);
        let all = [
            &[
                "-d",
                &device,
                "dump",
                "--no-cache",
                "-o",
                path.to_str().unwrap(),
            ],
            args,
        ]
        .concat();
        let output = leechio(&all);
        assert!(output.status.success(), "{}", text(&output.stderr));
        assert_eq!(text(&output.stderr), "", "{args:?}");
        let elf = std::fs::read(&path).unwrap();
        (path, notes(&elf))
    };

    // The note: the guest kernel's own text, KASLR's offset in it.
    let (core, found) = dump("ram.elf", &[]);
    assert_eq!(found.len(), 1, "{found:?}");
    let (owner, kind, desc) = &found[0];
    assert_eq!((owner.as_str(), *kind), ("VMCOREINFO", 0));
    assert!(*desc == guest.vmcoreinfo(), "{}", text(desc));
    let offset = text(desc)
        .lines()
        .find_map(|l| Some(u64::from_str_radix(l.strip_prefix("KERNELOFFSET=")?, 16).unwrap()))
        .expect("a KERNELOFFSET line");
    assert_eq!(offset, guest.kernel_text() - START_KERNEL);
    // An address space's dump (--dtb) carries it too.
    let text_end = format!("{:#x}", guest.kernel_text() + (2 << 20));
    let range = format!("{:#x}-{text_end}", guest.kernel_text());
    let (_, space_notes) = dump(
        "text.elf",
        &[
            "--dtb",
            &format!("{:#x}", guest.kernel_dtb()),
            "--range",
            &range,
        ],
    );
    assert_eq!(space_notes, found);

    // drgn: a Linux kernel's core; physical memory as the guest's, and
    // kernel virtual addresses (the image's banner, the direct map) by its
    // own walk of the tables, as the monitor translates them.
    let banner = guest.symbol("linux_banner");
    let banner_pa = guest.gva2gpa(banner).unwrap();
    let direct = guest.page_offset_base() + guest.kernel_dtb();
    let last_page = guest.memory().bytes() - 0x1000;
    let physical = [
        (banner_pa, 256),
        (guest.kernel_dtb(), 4096),
        (last_page, 4096),
    ];
    // A low address, which the kernel does not map, is no memory: the
    // segments sit at their direct-map addresses (as kdump's), not at
    // their physical ones.
    let virtual_ = [(banner, 256), (direct, 4096), (guest.kernel_dtb(), 16)];
    let said = drgn(&python, &core, &physical, &virtual_);
    eprintln!("drgn {}", said["version"]);
    assert_eq!(said["linux_kernel"], true, "{said}");
    for (i, &(pa, n)) in physical.iter().enumerate() {
        assert!(
            hex_bytes(&said["physical"][i]) == guest.pmemsave(pa, n as u64),
            "physical {pa:#x}: {}",
            said["physical"][i]
        );
    }
    assert!(
        said["virtual"][2]
            .as_str()
            .is_some_and(|s| s.starts_with("fault")),
        "{said}"
    );
    for (i, &(va, n)) in virtual_[..2].iter().enumerate() {
        let pa = guest.gva2gpa(va).unwrap();
        assert!(
            hex_bytes(&said["virtual"][i]) == guest.pmemsave(pa, n as u64),
            "virtual {va:#x}: {}",
            said["virtual"][i]
        );
    }
    assert!(text(&hex_bytes(&said["virtual"][0])).starts_with(guest.kernel_version()));

    // Without the note, the same file is no kernel's core to drgn.
    let (bare, none) = dump("bare.elf", &["--no-vmcoreinfo"]);
    assert_eq!(none, []);
    let said = drgn(&python, &bare, &physical[..1], &[]);
    assert_eq!(said["linux_kernel"], false, "{said}");
}
