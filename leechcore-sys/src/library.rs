//! Finding `leechcore.so` and resolving its functions, once.

use crate::*;
use std::collections::HashMap;
use std::ffi::{CStr, OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// How to get LeechCore, shown with every load failure.
pub const SETUP_HINT: &str = "get LeechCore with `make deps` or `make setup` (either installs it into target/leechcore/), \
or run `pip download --no-deps leechcorepyc==2.23.3` and unzip the wheel; keep leechcore.so \
beside its leechcore_device_*.so plugins and point LEECHCORE_LIB (or the lib= / --lib option) at it";

/// Environment variable naming the `leechcore.so` to load.
pub const ENV_VAR: &str = "LEECHCORE_LIB";

/// Names the dynamic linker is asked for when no path is known.
const LINKER_NAMES: [&str; 2] = ["leechcore.so", "libleechcore.so"];

/// The folder `make setup` installs LeechCore into, inside a cargo target
/// folder (`target/leechcore/`).
const SETUP_FOLDER: &str = "leechcore";

/// A loaded `leechcore.so` with every function resolved.
///
/// The function pointers stay valid as long as this value lives: it owns the
/// library handle. Share it with `Arc`; [`Library::load`] returns the same
/// instance for the same file.
pub struct Library {
    path: PathBuf,
    /// `LcCreate`.
    pub LcCreate: FnLcCreate,
    /// `LcCreateEx`.
    pub LcCreateEx: FnLcCreateEx,
    /// `LcClose`.
    pub LcClose: FnLcClose,
    /// `LcMemFree`.
    pub LcMemFree: FnLcMemFree,
    /// `LcAllocScatter1`.
    pub LcAllocScatter1: FnLcAllocScatter1,
    /// `LcAllocScatter2`.
    pub LcAllocScatter2: FnLcAllocScatter2,
    /// `LcAllocScatter3`.
    pub LcAllocScatter3: FnLcAllocScatter3,
    /// `LcRead`.
    pub LcRead: FnLcRead,
    /// `LcReadScatter`.
    pub LcReadScatter: FnLcReadScatter,
    /// `LcReadScatterEx`, present in LeechCore 2.19 and later.
    pub LcReadScatterEx: Option<FnLcReadScatterEx>,
    /// `LcWrite`.
    pub LcWrite: FnLcWrite,
    /// `LcWriteScatter`.
    pub LcWriteScatter: FnLcWriteScatter,
    /// `LcGetOption`.
    pub LcGetOption: FnLcGetOption,
    /// `LcSetOption`.
    pub LcSetOption: FnLcSetOption,
    /// `LcCommand`.
    pub LcCommand: FnLcCommand,
    // Last field: dropped after nothing can call through the pointers above.
    _lib: libloading::Library,
}

impl fmt::Debug for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.path)
            .field("has_read_scatter_ex", &self.LcReadScatterEx.is_some())
            .finish_non_exhaustive()
    }
}

/// One place the loader looked, and why it was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tried {
    /// The path or name asked for.
    pub candidate: String,
    /// Where the candidate came from (explicit path, environment, …).
    pub source: &'static str,
    /// Why it was not used.
    pub reason: String,
}

/// Why LeechCore could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No candidate could be opened; every attempt is listed.
    NotFound {
        /// Each place tried, in order.
        tried: Vec<Tried>,
    },
    /// A library was opened but lacks a function LeechCore must have.
    MissingSymbol {
        /// The library that was opened.
        path: PathBuf,
        /// The missing function.
        symbol: &'static str,
    },
}

impl LoadError {
    /// The message, ending in `hint` (how to get LeechCore and make this
    /// program load it) in place of [`SETUP_HINT`], which names the
    /// command line's and the plugin's ways: a C caller has other ones.
    pub fn message_with_hint(&self, hint: &str) -> String {
        match self {
            LoadError::NotFound { tried } => {
                let mut text = String::from("could not load LeechCore; looked in:\n");
                for t in tried {
                    text += &format!("  - {} ({}): {}\n", t.candidate, t.source, t.reason);
                }
                text + hint
            }
            LoadError::MissingSymbol { path, symbol } => format!(
                "{} is not LeechCore: it has no function `{symbol}`; {hint}",
                path.display()
            ),
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message_with_hint(SETUP_HINT))
    }
}

impl std::error::Error for LoadError {}

impl Library {
    /// Finds and loads LeechCore, or returns the one already loaded from the
    /// same place.
    ///
    /// Search order: `explicit`; the `LEECHCORE_LIB` environment variable;
    /// `leechcore.so` in the folder of the module (executable or shared
    /// library) this crate is linked into; for a program in a `bin` folder,
    /// `../lib/` (where `make install` puts LeechCore beside `libleechio`,
    /// under the same prefix); the dynamic linker's search for
    /// `leechcore.so` and `libleechcore.so`; when that module is a build of
    /// this repository (it lies in a cargo target folder, `target/PROFILE/`
    /// or `target/PROFILE/deps/`), `target/leechcore/`, where `make setup`
    /// installs LeechCore. No path of the machine that built it is kept. An explicit path or the environment variable, when
    /// given, is the only candidate: a user who names a library means it.
    pub fn load(explicit: Option<&Path>) -> Result<Arc<Library>, LoadError> {
        if let Some(path) = explicit {
            return Self::load_one(path.as_os_str(), "explicit path");
        }
        if let Some(path) = std::env::var_os(ENV_VAR).filter(|p| !p.is_empty()) {
            return Self::load_one(&path, ENV_VAR);
        }
        let mut candidates: Vec<(OsString, &'static str)> = Vec::new();
        let module_dir = own_module_dir();
        if let Some(dir) = &module_dir {
            candidates.push((dir.join("leechcore.so").into(), "beside this module"));
            if let Some(lib) = prefix_lib_folder(dir) {
                candidates.push((lib.join("leechcore.so").into(), "the prefix's lib folder"));
            }
        }
        for name in LINKER_NAMES {
            candidates.push((name.into(), "dynamic linker search"));
        }
        if let Some(setup) = module_dir.as_deref().and_then(setup_folder) {
            candidates.push((setup.join("leechcore.so").into(), "make setup"));
        }
        let mut tried = Vec::new();
        for (candidate, source) in candidates {
            match Self::load_one(&candidate, source) {
                Ok(lib) => return Ok(lib),
                Err(LoadError::NotFound { tried: t }) => tried.extend(t),
                Err(LoadError::MissingSymbol { symbol, .. }) => tried.push(Tried {
                    candidate: candidate.to_string_lossy().into_owned(),
                    source,
                    reason: format!("not LeechCore: no function `{symbol}`"),
                }),
            }
        }
        Err(LoadError::NotFound { tried })
    }

    /// The file this library was loaded from (canonical), or the bare name
    /// the dynamic linker resolved if it cannot tell where it found it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads one candidate, through a process-wide cache keyed by the
    /// canonical file so two spellings of one library share one instance.
    fn load_one(candidate: &OsStr, source: &'static str) -> Result<Arc<Library>, LoadError> {
        let not_found = |reason: String| LoadError::NotFound {
            tried: vec![Tried {
                candidate: candidate.to_string_lossy().into_owned(),
                source,
                reason,
            }],
        };
        let mut key = if candidate.as_encoded_bytes().contains(&b'/') {
            let file = std::fs::canonicalize(candidate).map_err(|e| not_found(e.to_string()))?;
            // dlopen of a pipe waits for a writer for ever.
            let meta = std::fs::metadata(&file).map_err(|e| not_found(e.to_string()))?;
            if !meta.is_file() {
                return Err(not_found(format!(
                    "not a regular file ({}), so not a library",
                    if meta.is_dir() {
                        "a folder"
                    } else {
                        "a pipe, a device or a socket"
                    }
                )));
            }
            file
        } else {
            PathBuf::from(candidate)
        };
        static CACHE: OnceLock<Mutex<HashMap<PathBuf, Arc<Library>>>> = OnceLock::new();
        let mut cache = CACHE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(lib) = cache.get(&key) {
            return Ok(lib.clone());
        }
        // SAFETY: loading runs the library's initialisers; LeechCore's only
        // set up its own globals. The caller chose this file as LeechCore.
        let lib =
            unsafe { libloading::Library::new(&key) }.map_err(|e| not_found(error_text(&e)))?;
        if key.is_relative() {
            // The linker found a bare name somewhere, or had the library
            // loaded already (a device plugin needs it): key it by its file,
            // so it is the instance loaded from there, under its real path.
            if let Some(file) = loaded_file(&lib) {
                key = file;
                if let Some(cached) = cache.get(&key) {
                    return Ok(cached.clone());
                }
            }
        }
        let lib = Arc::new(Self::resolve(lib, key.clone())?);
        cache.insert(key, lib.clone());
        Ok(lib)
    }

    fn resolve(lib: libloading::Library, path: PathBuf) -> Result<Library, LoadError> {
        /// Resolves one function; the type comes from the field it fills.
        fn sym<T: Copy>(lib: &libloading::Library, name: &'static str) -> Option<T> {
            let cname = format!("{name}\0");
            // SAFETY: every `T` used below is the `extern "C"` signature
            // LeechCore's header declares for `name`.
            unsafe { lib.get::<T>(cname.as_bytes()).ok().map(|s| *s) }
        }
        let missing = |symbol| LoadError::MissingSymbol {
            path: path.clone(),
            symbol,
        };
        macro_rules! required {
            ($name:ident) => {
                sym(&lib, stringify!($name)).ok_or_else(|| missing(stringify!($name)))?
            };
        }
        Ok(Library {
            LcCreate: required!(LcCreate),
            LcCreateEx: required!(LcCreateEx),
            LcClose: required!(LcClose),
            LcMemFree: required!(LcMemFree),
            LcAllocScatter1: required!(LcAllocScatter1),
            LcAllocScatter2: required!(LcAllocScatter2),
            LcAllocScatter3: required!(LcAllocScatter3),
            LcRead: required!(LcRead),
            LcReadScatter: required!(LcReadScatter),
            LcReadScatterEx: sym(&lib, "LcReadScatterEx"),
            LcWrite: required!(LcWrite),
            LcWriteScatter: required!(LcWriteScatter),
            LcGetOption: required!(LcGetOption),
            LcSetOption: required!(LcSetOption),
            LcCommand: required!(LcCommand),
            path,
            _lib: lib,
        })
    }
}

/// libloading wraps dlerror's text; the inner text is what a user needs.
fn error_text(e: &libloading::Error) -> String {
    match e {
        libloading::Error::DlOpen { desc } => format!("{desc:?}").trim_matches('"').to_string(),
        other => other.to_string(),
    }
}

/// The folder of the executable or shared library this code is part of.
fn own_module_dir() -> Option<PathBuf> {
    static ANCHOR: u8 = 0;
    let module = module_file((&ANCHOR as *const u8).cast()).unwrap_or_default();
    // The main program's name may come back bare, as it was started.
    let module = if module.is_absolute() {
        module
    } else {
        std::env::current_exe().ok()?
    };
    module.parent().map(Path::to_path_buf)
}

/// `PREFIX/lib/` for a module in `PREFIX/bin/`: an installed program's
/// libraries, as `make install` lays them out.
fn prefix_lib_folder(module_dir: &Path) -> Option<PathBuf> {
    if module_dir.file_name()? != "bin" {
        return None;
    }
    Some(module_dir.parent()?.join("lib"))
}

/// `target/leechcore/` for a module in `target/PROFILE/` or in
/// `target/PROFILE/deps/` (a program, library or test of a build of this
/// repository), if that folder exists.
fn setup_folder(module_dir: &Path) -> Option<PathBuf> {
    let profile = if module_dir.file_name()? == "deps" {
        module_dir.parent()?
    } else {
        module_dir
    };
    let folder = profile.parent()?.join(SETUP_FOLDER);
    folder.is_dir().then_some(folder)
}

/// The file of the module (executable or shared library) that holds `addr`,
/// as the dynamic linker names it.
fn module_file(addr: *const libc::c_void) -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the address and fills `info`.
    let found = unsafe { libc::dladdr(addr, info.as_mut_ptr()) } != 0;
    // SAFETY: zero-initialised, and filled by dladdr when `found`.
    let info = unsafe { info.assume_init() };
    if !found || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returns a NUL-terminated name owned by the linker.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
}

/// The canonical file of a loaded library, found through one of its
/// functions.
fn loaded_file(lib: &libloading::Library) -> Option<PathBuf> {
    // SAFETY: only the symbol's address is used, never called.
    let create = unsafe { lib.get::<*const libc::c_void>(b"LcCreate\0") }.ok()?;
    std::fs::canonicalize(module_file(*create)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_in_a_bin_folder_looks_in_the_prefixs_lib_folder() {
        assert_eq!(
            prefix_lib_folder(Path::new("/usr/local/bin")),
            Some(PathBuf::from("/usr/local/lib"))
        );
        assert_eq!(prefix_lib_folder(Path::new("/repo/target/release")), None);
        assert_eq!(prefix_lib_folder(Path::new("/")), None);
    }

    #[test]
    fn module_dir_is_the_test_binary_folder() {
        let exe = std::env::current_exe().unwrap();
        assert_eq!(own_module_dir().unwrap(), exe.parent().unwrap());
    }

    /// `target/leechcore/` of this build, as the loader finds it.
    fn setup_dir() -> PathBuf {
        setup_folder(&own_module_dir().unwrap())
            .expect("LeechCore in target/leechcore (make setup)")
    }

    #[test]
    #[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
    fn the_setup_folder_is_found_from_a_build_not_from_a_path_kept_at_build_time() {
        // This test binary lies in target/debug/deps/.
        let exe = std::env::current_exe().unwrap();
        let target = exe.parent().unwrap().parent().unwrap().parent().unwrap();
        assert_eq!(setup_dir(), target.join("leechcore"));
        assert_eq!(
            setup_folder(&target.join("release")),
            Some(target.join("leechcore"))
        );
        // Elsewhere (an installed program): not looked for.
        let dir = std::env::temp_dir().join(format!("leechcore-sys-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        assert_eq!(setup_folder(&dir.join("bin")), None);
        std::fs::create_dir_all(dir.join(SETUP_FOLDER)).unwrap();
        assert_eq!(setup_folder(&dir.join("bin")), Some(dir.join(SETUP_FOLDER)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    #[cfg_attr(not(leechio_lab), ignore = "needs `make setup`")]
    fn a_bare_name_the_linker_resolves_is_keyed_by_its_file() {
        let file = std::fs::canonicalize(setup_dir().join("leechcore.so")).unwrap();
        let lib = Library::load(Some(&file)).unwrap();
        // A device plugin pulls in LeechCore as `leechcore.so`: from then
        // on the linker resolves that bare name to the loaded library.
        // SAFETY: the plugin's initialisers only set up its own globals.
        let _plugin =
            unsafe { libloading::Library::new(setup_dir().join("leechcore_device_qemu.so")) }
                .unwrap();
        let bare = Library::load(Some(Path::new("leechcore.so"))).unwrap();
        assert!(Arc::ptr_eq(&lib, &bare), "a second instance for one file");
        assert_eq!(bare.path(), file);
    }

    #[test]
    fn explicit_missing_path_is_the_only_candidate_and_names_the_fix() {
        let err = Library::load(Some(Path::new("/nonexistent/leechcore.so"))).unwrap_err();
        let LoadError::NotFound { tried } = &err else {
            panic!("unexpected {err:?}")
        };
        assert_eq!(tried.len(), 1);
        assert_eq!(tried[0].candidate, "/nonexistent/leechcore.so");
        assert_eq!(tried[0].source, "explicit path");
        let text = err.to_string();
        assert!(text.contains("No such file"), "{text}");
        assert!(
            text.contains("make setup") && text.contains("leechcorepyc==2.23.3"),
            "{text}"
        );
    }

    #[test]
    fn a_pipe_or_a_device_is_refused_without_opening_it() {
        let fifo = std::env::temp_dir().join(format!("leechcore-sys-{}.fifo", std::process::id()));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string naming a path of this process's own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for path in [fifo.clone(), PathBuf::from("/dev/zero")] {
            // On another thread, given 5 s: dlopen of a pipe never returns.
            let (tx, rx) = std::sync::mpsc::channel();
            let asked = path.clone();
            std::thread::spawn(move || tx.send(Library::load(Some(&asked)).map(|_| ())));
            let err = rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("{} is still loading after 5 s", path.display()))
                .unwrap_err();
            let LoadError::NotFound { tried } = &err else {
                panic!("unexpected {err:?}")
            };
            assert_eq!(
                tried[0].reason,
                "not a regular file (a pipe, a device or a socket), so not a library"
            );
        }
        std::fs::remove_file(&fifo).unwrap();
    }

    #[test]
    fn library_without_leechcore_symbols_names_the_first_missing_one() {
        // libc is on every machine and exports none of LeechCore's functions.
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("libc.so.6");
        let err = Library::load(Some(Path::new(libc))).unwrap_err();
        match &err {
            LoadError::MissingSymbol { symbol, .. } => assert_eq!(*symbol, "LcCreate"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("no function `LcCreate`"), "{err}");
    }
}
