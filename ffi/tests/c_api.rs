//! The C and C++ API as C and C++ programs use it: `scripts/install-c.sh`
//! installs the header and the release build of the library (built as
//! `make ffi` builds it; refused when older than its sources) into a
//! temporary prefix, the programs under `tests/c/` and `tests/cpp/` (and
//! the example of `ffi/README.md`) are compiled against that prefix with
//! `-Wall -Wextra -Werror`, and run against real image files read through
//! LeechCore: a 16 MiB image whose every word is a hash of its address, and
//! an image holding a process made by memflow's `DummyOs`, whose own
//! translations are the oracle for the virtual part (in 4-level paging,
//! and in 5-level through a PML5 page added above its PML4).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod c_build;

use c_build::{build_dir, compile, install, installed_only, run};
use memflow::dummy::{DummyMemory, DummyOs};
use memflow::prelude::v1::*;

const IMAGE_SIZE: usize = 16 << 20;
/// Size of the DummyOs process's mapping.
const VSIZE: u64 = 0x40_000;
/// Its byte at offset `o` is `pattern_byte(VSEED + o)`.
const VSEED: u64 = 0x5eed_0000_0000;
/// The flags of the PML5 entries added above DummyOs's PML4: present,
/// writable, user (so they narrow no access).
const PML5E_FLAGS: u64 = 0x7;

/// The 8 bytes of the pattern image at the 8-aligned address `addr`; the C
/// programs compute the same function.
fn pattern_word(addr: u64) -> u64 {
    let mut z = addr.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn pattern_byte(addr: u64) -> u8 {
    (pattern_word(addr & !7) >> (8 * (addr & 7))) as u8
}

#[test]
fn the_library_exports_only_the_c_api() {
    let out = run(Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(build_dir().join("libleechio.so")));
    let text = String::from_utf8_lossy(&out.stdout);
    let foreign: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" T ") || l.contains(" D ") || l.contains(" B "))
        .map(|l| l.rsplit(' ').next().unwrap_or(""))
        .filter(|name| !name.starts_with("leechio_"))
        .collect();
    assert!(
        foreign.is_empty(),
        "libleechio.so exports more than its API: {foreign:?}"
    );
}

/// A temporary prefix with leechio installed, the two images and the
/// parameter file the test programs read.
struct Fixture {
    dir: tempfile::TempDir,
    params: PathBuf,
    phys: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        install(&dir.path().join("prefix"));

        let phys = dir.path().join("phys.raw");
        let mut image = vec![0u8; IMAGE_SIZE];
        for (i, word) in image.chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&pattern_word(i as u64 * 8).to_le_bytes());
        }
        File::create(&phys).unwrap().write_all(&image).unwrap();

        let virt = dir.path().join("virt.raw");
        let mut params = format!(
            "version {}\nphys {}\nvirt {}\nvseed {VSEED:#x}\nvsize {VSIZE:#x}\n",
            env!("CARGO_PKG_VERSION"),
            phys.display(),
            virt.display()
        );
        params += &dummy_os_image(&virt);
        let params_path = dir.path().join("params.txt");
        std::fs::write(&params_path, params).unwrap();
        Fixture {
            dir,
            params: params_path,
            phys,
        }
    }

    fn prefix(&self) -> PathBuf {
        self.dir.path().join("prefix")
    }

    /// Compiles `sources` against the installed header and library
    /// (shared unless `static_lib`), into the fixture's folder.
    fn compile(&self, compiler: &str, std: &str, sources: &[PathBuf], static_lib: bool) -> PathBuf {
        compile(
            &self.prefix(),
            self.dir.path(),
            compiler,
            std,
            sources,
            static_lib,
        )
    }

    /// Runs a test program on the parameter file, through `wrapper` if
    /// not empty; returns its output.
    fn run_program(&self, wrapper: &[&str], exe: &Path) -> Output {
        let (program, args) = match wrapper.split_first() {
            Some((w, rest)) => (PathBuf::from(w), rest.to_vec()),
            None => (exe.to_path_buf(), Vec::new()),
        };
        let mut cmd = Command::new(program);
        cmd.args(args);
        if !wrapper.is_empty() {
            cmd.arg(exe);
        }
        run(installed_only(cmd.arg(&self.params)))
    }
}

/// Writes a 16 MiB image holding a DummyOs process of `VSIZE` bytes of the
/// pattern, and returns its parameter lines: page-table root, base, and
/// memflow's translations of addresses in, around and outside the mapping.
fn dummy_os_image(path: &Path) -> String {
    let mut os = DummyOs::with_seed(DummyMemory::new(IMAGE_SIZE), 0xc0de);
    let content: Vec<u8> = (0..VSIZE).map(|o| pattern_byte(VSEED + o)).collect();
    let pid = os.alloc_process(VSIZE as usize, &content);
    let info = os.process_info_by_pid(pid).unwrap();
    let (dtb, base) = (info.dtb1, info.address.to_umem());

    // The oracle is sound: memflow reads the process as the pattern.
    let mut process = os.process_by_pid(pid).unwrap();
    let mut back = vec![0u8; VSIZE as usize];
    process.read_raw_into(base.into(), &mut back).unwrap();
    assert!(back == content, "DummyOs does not hold the process bytes");
    drop(process);

    let mut lines = format!("dtb {:#x}\nvbase {base:#x}\n", dtb.to_umem());
    let mut seed = 7u64;
    let mut next = move |bound: u64| {
        seed = pattern_word(seed);
        seed % bound
    };
    let mut vas: Vec<u64> = (0..48).map(|_| base + next(VSIZE)).collect();
    vas.extend((0..6).map(|k| base + VSIZE + k * 0x1000 + next(0x1000)));
    vas.extend((1..4).map(|k| base - k * 0x1000));
    vas.push(base ^ (1 << 40));
    let mut mapped = 0;
    for va in vas {
        match os.vtop(dtb, va.into()) {
            Some(pa) => {
                mapped += 1;
                lines += &format!("vtop {va:#x} {:#x}\n", pa.to_umem());
            }
            None => lines += &format!("vtop {va:#x} none\n"),
        }
    }
    assert!(mapped >= 48, "only {mapped} sample addresses are mapped");

    let mut image = vec![0u8; IMAGE_SIZE];
    os.phys_view()
        .read_raw_into(Address::null(), &mut image)
        .unwrap();
    // A 5-level root over the same tables, in a page past DummyOs's memory:
    // its PML5 entries 0 and 1 both name the process's PML4, so a 5-level
    // walk of `va` and of `va + 2^48` ends where memflow's 4-level walk of
    // `va` does.
    let pml5 = IMAGE_SIZE as u64;
    let mut page = [0u8; 0x1000];
    for i in 0..2 {
        let entry = (dtb.to_umem() & 0x000f_ffff_ffff_f000) | PML5E_FLAGS;
        page[i * 8..i * 8 + 8].copy_from_slice(&entry.to_le_bytes());
    }
    image.extend_from_slice(&page);
    lines += &format!("dtb5 {pml5:#x}\n");
    File::create(path).unwrap().write_all(&image).unwrap();
    lines
}

/// The sources of the C test program `name` (with the helpers they share).
fn c_program(name: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    vec![dir.join(name), dir.join("common.c")]
}

fn c_test() -> Vec<PathBuf> {
    c_program("api_test.c")
}

fn assert_passed(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("{what}: {stdout}");
    assert!(
        stdout.contains("checks passed"),
        "{what} did not report its checks:\n{stdout}"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn c_program_passes_against_the_installed_shared_library() {
    let fx = Fixture::new();
    let exe = fx.compile("cc", "-std=c11", &c_test(), false);
    assert_passed(&fx.run_program(&[], &exe), "api_test (shared)");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn c_program_passes_against_the_installed_static_library() {
    let fx = Fixture::new();
    let exe = fx.compile("cc", "-std=c11", &c_test(), true);
    assert_passed(&fx.run_program(&[], &exe), "api_test (static)");
}

/// The valgrind command ffi/README.md gives C users, for the program
/// `exe`, with `prefix` where the README installs to (`$HOME/.local`):
/// the words before the program.
fn readme_valgrind_command(prefix: &Path) -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let block = "```sh\nvalgrind ";
    let start = readme
        .find(block)
        .expect("ffi/README.md gives no valgrind command")
        + "```sh\n".len();
    let mut command = String::new();
    for line in readme[start..].lines() {
        match line.strip_suffix('\\') {
            Some(continued) => command += continued,
            None => {
                command += line;
                break;
            }
        }
    }
    let prefix = prefix.display().to_string();
    let mut words: Vec<String> = command
        .split_whitespace()
        .map(|w| w.replace("$HOME/.local", &prefix))
        .collect();
    assert_eq!(
        words.pop().as_deref(),
        Some("./example"),
        "the README's valgrind command: {command}"
    );
    words
}

/// Runs the C program `name` under valgrind exactly as ffi/README.md tells
/// a C user to (the suppressions installed with the library), and asserts
/// valgrind found nothing: no leak but the suppressed process-lifetime
/// blocks, and no undefined byte used (promises_test branches on every
/// byte of every struct the library fills).
fn assert_clean_under_valgrind(name: &str) {
    let fx = Fixture::new();
    let exe = fx.compile("cc", "-std=c11", &c_program(name), false);
    let command = readme_valgrind_command(&fx.prefix());
    let words: Vec<&str> = command.iter().map(String::as_str).collect();
    let out = fx.run_program(&words, &exe);
    assert_passed(&out, &format!("{name} under valgrind"));
    // Valgrind's own word that it ran and found nothing.
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        report.contains("ERROR SUMMARY: 0 errors"),
        "valgrind report:\n{report}"
    );
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn c_program_runs_clean_under_valgrind() {
    assert_clean_under_valgrind("api_test.c");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn c_promises_run_clean_under_valgrind() {
    assert_clean_under_valgrind("promises_test.c");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn c_promises_hold_against_the_installed_library() {
    let fx = Fixture::new();
    let exe = fx.compile("cc", "-std=c11", &c_program("promises_test.c"), false);
    assert_passed(&fx.run_program(&[], &exe), "promises_test");
}

#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn cpp_program_passes_against_the_installed_library() {
    let fx = Fixture::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cpp/api_test.cpp");
    let exe = fx.compile("c++", "-std=c++17", &[src], false);
    assert_passed(&fx.run_program(&[], &exe), "api_test.cpp");
}

/// The code blocks of ffi/README.md marked `c` or `cpp`, in order, as
/// (language, text).
fn readme_examples() -> Vec<(String, String)> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut rest = readme.as_str();
    while let Some(at) = rest.find("```") {
        let after = &rest[at + 3..];
        let (lang, body) = after.split_once('\n').unwrap();
        let end = body
            .find("```")
            .expect("an unclosed code block in ffi/README.md");
        if lang == "c" || lang == "cpp" {
            out.push((lang.to_string(), body[..end].to_string()));
        }
        rest = &body[end + 3..];
    }
    out
}

/// The README's examples compile as printed, and do what the README says.
#[test]
#[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
fn readme_examples_compile_and_run() {
    let examples = readme_examples();
    let langs: Vec<&str> = examples.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(langs, ["c", "c", "cpp"], "the examples of ffi/README.md");
    let fx = Fixture::new();
    let device = format!("file://{}", fx.phys.display());
    let mut outputs = Vec::new();
    for (i, (lang, text)) in examples.iter().enumerate() {
        let src = fx.dir.path().join(format!("example{i}.{lang}"));
        std::fs::write(&src, text).unwrap();
        let exe = match lang.as_str() {
            "c" => fx.compile("cc", "-std=c11", &[src], false),
            _ => fx.compile("c++", "-std=c++17", &[src], false),
        };
        let out = run(installed_only(Command::new(&exe).args([
            device.as_str(),
            "0x1000",
            "0x2000",
        ])));
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let word = format!("{:016x}", pattern_word(0x1000));
    // The batch example: the word, and the read past the end reported.
    let batch = &outputs[0];
    assert!(
        batch.contains(&format!("word at 0x1000: {word}")),
        "{batch}"
    );
    assert!(
        batch.contains("op 1, bytes +0..+0x8: address past the end"),
        "{batch}"
    );
    assert!(batch.contains("file device, LeechCore 2."), "{batch}");
    // The chase: the image's words point far past its end, so each chain
    // reads one word, fails its second hop, and stops after two flushes.
    let chase = &outputs[1];
    assert!(
        chase.contains(&format!(
            "chain 0: hops 1, last word {:#x}",
            pattern_word(0x1000)
        )) && chase.contains(&format!(
            "chain 1: hops 1, last word {:#x}",
            pattern_word(0x2000)
        )) && chase.contains("2 flushes"),
        "{chase}"
    );
    assert!(outputs[2].contains(&word), "{}", outputs[2]);
}
