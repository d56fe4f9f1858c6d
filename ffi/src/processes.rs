//! A Linux target's kernel, found with no profile, its processes, and the
//! address space of one of them by pid.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;

use leechio_rs::linux::{CacheLocation, FindError, Hints, Kernel, Process, ProcessList};
use leechio_rs::AddressSpace;

use crate::device::leechio_device;
use crate::error::{guard, guard_value, non_null, Fail};
use crate::handle::Handle;
use crate::leechio_status::{self, *};
use crate::space::{leechio_cache_options, leechio_space, named_paging, vm_config};

/// A Linux kernel found in a device's memory (`leechio_kernel_find`):
/// its page tables and their paging mode (`leechio_kernel_levels`), its
/// types (BTF) and where its processes start. It reads the memory it was
/// found in, and keeps the device open until it is freed
/// (`leechio_kernel_free`). Safe to use from several threads at once.
pub struct leechio_kernel {
    pub(crate) kernel: Kernel,
}

impl Handle for leechio_kernel {
    const NAME: &'static str = "kernel";
}

/// What the caller knows already (`leechio_kernel_find`); each hint skips
/// a step of the search. Zero-fill it for no hints.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct leechio_kernel_hints {
    /// A page-table root with the kernel's half mapped (the kernel's own,
    /// or any process's CR3); 0 for none. Skips the search of low memory.
    pub dtb: u64,
    /// The kernel's virtual base (`_text`); 0 for none.
    pub kernel_base: u64,
    /// Path of a BTF file of the same kernel (its
    /// `/sys/kernel/btf/vmlinux`), used when the kernel holds no BTF in
    /// memory; NULL for none.
    pub btf_file: *const c_char,
    /// The paging mode of the kernel's tables: 4 or 5 (levels), or 0 to
    /// find it from the tables. Needed only where they do not show it
    /// (`LEECHIO_PAGING_UNKNOWN`): a wrong mode misreads every table.
    pub levels: u32,
    /// Neither read nor write the cache of kernels found (under
    /// `$XDG_CACHE_HOME/leechio/` or `~/.cache/leechio/`).
    pub no_cache: bool,
    /// Always 0: explicit padding, so that every byte of the struct is
    /// defined.
    pub padding: [u8; 3],
}

/// One process (a thread-group leader), as `leechio_kernel_processes`
/// reports it. The strings are valid only during the callback.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct leechio_process {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid (0 for the tasks the kernel starts itself);
    /// `UINT32_MAX` when its parent is not a task of the pid table (the
    /// list is then incomplete, and its message says so).
    pub ppid: u32,
    /// Its thread group (its own pid).
    pub tgid: u32,
    /// Its threads, itself included.
    pub thread_count: u32,
    /// Physical address of its top-level page table (`mm->pgd`), for
    /// `leechio_space_new` (in the kernel's paging mode,
    /// `leechio_kernel_levels`); 0 for kernel threads and processes
    /// without memory (zombies).
    pub dtb: u64,
    /// Kernel address of its `task_struct`.
    pub task: u64,
    /// Kernel address of its `mm_struct`; 0 when `dtb` is 0.
    pub mm: u64,
    /// Its name (`comm`), NUL-terminated.
    pub name: *const c_char,
    /// Its arguments joined by spaces, NUL-terminated (empty for kernel
    /// threads).
    pub cmdline: *const c_char,
    /// Its arguments as `/proc/PID/cmdline` gives them: each ends in a
    /// NUL; `args_length` bytes in all (0 for kernel threads).
    pub args: *const c_char,
    /// Bytes at `args`.
    pub args_length: usize,
    /// `/proc`'s state letter: 'R', 'S', 'D', 'T', 't', 'X', 'Z', 'P' or 'I'.
    pub state: c_char,
    /// A kernel thread (`PF_KTHREAD`).
    pub kernel_thread: bool,
    /// Always 0: explicit padding, so that every byte of the struct is
    /// defined.
    pub padding: [u8; 6],
}

/// Called once per process, by pid. `process` and its strings are valid
/// only during the call.
///
/// It runs on the thread that made the call, before the call returns, and
/// may call any function of this library, on the same handles too, except
/// freeing the handle the running call was given.
pub type leechio_process_fn =
    Option<unsafe extern "C" fn(context: *mut c_void, process: *const leechio_process)>;

/// Finds the Linux kernel in `device`'s memory with no configuration
/// (page tables, image, kallsyms, BTF; about 8 device calls, 6 when the
/// cache knows the kernel) and stores its handle in `*out`. Returns
/// `LEECHIO_NOT_FOUND` with a message naming what is missing when the
/// target is not Linux or its kernel holds no BTF (and `hints` gives no
/// usable BTF file); `LEECHIO_PAGING_UNKNOWN` when a kernel shows in both
/// 4-level and 5-level readings of its tables and nothing tells which is
/// right (give the hints' `levels`); `LEECHIO_INVALID_ARGUMENT` for a
/// `levels` hint other than 0, 4 or 5.
///
/// NULL: `hints` may be NULL (no hints); `device` and `out` may not
/// (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `device` must be a live handle; a non-NULL `hints` readable, its
/// `btf_file` NULL or a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_kernel_find(
    device: *const leechio_device,
    hints: *const leechio_kernel_hints,
    out: *mut *mut leechio_kernel,
) -> leechio_status {
    guard("leechio_kernel_find", || {
        non_null(out, "out")?;
        // SAFETY: checked non-NULL; NULL on every failure below.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: the caller's contract.
        let d = unsafe { leechio_device::lend(device)? };
        let mut found = Hints::default();
        if !hints.is_null() {
            // SAFETY: non-NULL; the caller passes valid hints.
            let h = unsafe { *hints };
            found.dtb = (h.dtb != 0).then_some(h.dtb);
            found.kernel_base = (h.kernel_base != 0).then_some(h.kernel_base);
            if !h.btf_file.is_null() {
                // SAFETY: non-NULL; the caller passes a NUL-terminated string.
                let path = unsafe { CStr::from_ptr(h.btf_file) }
                    .to_str()
                    .map_err(|_| Fail::new(LEECHIO_INVALID_ARGUMENT, "`btf_file` is not UTF-8"))?;
                found.btf_file = Some(PathBuf::from(path));
            }
            if h.no_cache {
                found.cache = CacheLocation::Off;
            }
            found.paging = named_paging(h.levels)?;
        }
        let kernel = Kernel::find(&d.mem, &found).map_err(|e| {
            let status = match e {
                FindError::AmbiguousPaging { .. } => LEECHIO_PAGING_UNKNOWN,
                _ => LEECHIO_NOT_FOUND,
            };
            Fail::new(status, e.to_string())
        })?;
        // SAFETY: checked non-NULL above.
        unsafe { leechio_kernel { kernel }.give(out) };
        Ok(())
    })
}

/// Frees a kernel handle. NULL is ignored.
///
/// # Safety
/// `kernel` must be NULL or a handle from `leechio_kernel_find`, not used
/// again afterwards (nor freed from a callback of a call on it).
#[no_mangle]
pub unsafe extern "C" fn leechio_kernel_free(kernel: *mut leechio_kernel) {
    guard("leechio_kernel_free", || {
        // SAFETY: NULL or a handle freed once (the caller's contract).
        unsafe { leechio_kernel::free(kernel) };
        Ok(())
    });
}

/// The paging mode of the kernel's tables, which every process's space
/// shares: 4 or 5 (levels of page tables); 0 for a NULL `kernel` (then the
/// last error says so).
///
/// # Safety
/// `kernel` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn leechio_kernel_levels(kernel: *const leechio_kernel) -> u32 {
    guard_value("leechio_kernel_levels", 0, || {
        // SAFETY: the caller's contract.
        let k = unsafe { leechio_kernel::lend(kernel)? };
        Ok(u32::from(k.kernel.paging().levels()))
    })
}

/// Why a list is incomplete, or `Ok`.
fn list_result(list: &ProcessList) -> Result<(), Fail> {
    match list.failed.first() {
        None => Ok(()),
        Some(first) => Err(Fail::new(
            LEECHIO_INCOMPLETE,
            format!(
                "{} item(s) could not be read, so {} processes are listed; first: {first}",
                list.failed.len(),
                list.processes.len()
            ),
        )),
    }
}

/// Text for C: a NUL inside (none in `comm`; possible in lossy decoding
/// of odd arguments) is dropped.
fn c_text(text: &str) -> CString {
    CString::new(text.bytes().filter(|&b| b != 0).collect::<Vec<u8>>()).unwrap_or_default()
}

/// Lists the kernel's processes from its pid table (11 device calls on a
/// system whose pids stay under 4,096, 12 above: see docs/linux.md), calling
/// `on_process` for each, by pid. Returns `LEECHIO_OK`, or
/// `LEECHIO_INCOMPLETE` when some structures could not be read or did not
/// hold together (a target that changed while it was read): the message
/// says how many and the first; the processes reported stand.
///
/// NULL: `context` may be NULL (it is only passed on); `kernel` and
/// `on_process` may not (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `kernel` must be a live handle; `on_process` safe to call with
/// `context`.
#[no_mangle]
pub unsafe extern "C" fn leechio_kernel_processes(
    kernel: *const leechio_kernel,
    on_process: leechio_process_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_kernel_processes", || {
        // SAFETY: the caller's contract.
        let k = unsafe { leechio_kernel::lend(kernel)? };
        let Some(callback) = on_process else {
            return Err(Fail::new(LEECHIO_NULL_ARGUMENT, "`on_process` is NULL"));
        };
        let list = k.kernel.processes();
        for p in &list.processes {
            report(p, |record| {
                // SAFETY: the caller vouches for the callback; `record`
                // and its strings live until it returns.
                unsafe { callback(context, record) }
            });
        }
        list_result(&list)
    })
}

/// Calls `f` with the C record of `p`, whose strings live meanwhile.
fn report(p: &Process, f: impl FnOnce(&leechio_process)) {
    let name = c_text(&p.name);
    let cmdline = c_text(&p.cmdline.join(" "));
    let args: Vec<u8> = p
        .cmdline
        .iter()
        .flat_map(|a| a.bytes().chain([0]))
        .collect();
    f(&leechio_process {
        pid: p.pid,
        ppid: p.ppid.unwrap_or(u32::MAX),
        tgid: p.tgid,
        thread_count: 1 + p.threads.len() as u32,
        dtb: p.dtb.unwrap_or(0),
        task: p.task,
        mm: p.mm.unwrap_or(0),
        name: name.as_ptr(),
        cmdline: cmdline.as_ptr(),
        args: args.as_ptr().cast(),
        args_length: args.len(),
        state: p.state as c_char,
        kernel_thread: p.kernel_thread,
        padding: [0; 6],
    });
}

/// Creates the address space of process `pid` (its `mm->pgd`), like
/// `leechio_space_new` with that DTB in the kernel's paging mode
/// (`leechio_kernel_levels`), after listing the processes to find it.
/// Returns `LEECHIO_NOT_FOUND` when no process has that pid, or it
/// has no address space of its own (a kernel thread, a zombie).
///
/// NULL: `options` may be NULL (as for `leechio_space_new`); `kernel` and
/// `out` may not (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `kernel` must be a live handle; a non-NULL `options` readable; `out`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn leechio_space_new_for_pid(
    kernel: *const leechio_kernel,
    pid: u32,
    options: *const leechio_cache_options,
    out: *mut *mut leechio_space,
) -> leechio_status {
    guard("leechio_space_new_for_pid", || {
        non_null(out, "out")?;
        // SAFETY: checked non-NULL; NULL on every failure below.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: the caller's contract.
        let k = unsafe { leechio_kernel::lend(kernel)? };
        // SAFETY: the caller's contract.
        let config = unsafe { vm_config(options) };
        let list = k.kernel.processes();
        let process = list.get(pid).ok_or_else(|| {
            let why = match list.failed.is_empty() {
                true => String::new(),
                false => format!(
                    " ({} item(s) of the list could not be read)",
                    list.failed.len()
                ),
            };
            Fail::new(LEECHIO_NOT_FOUND, format!("no process has pid {pid}{why}"))
        })?;
        let dtb = process.dtb.ok_or_else(|| {
            let what = match process.kernel_thread {
                true => "a kernel thread",
                false => "a process without memory (a zombie?)",
            };
            Fail::new(
                LEECHIO_NOT_FOUND,
                format!(
                    "pid {pid} ({}) is {what}: it has no address space of its own",
                    process.name
                ),
            )
        })?;
        // A process's tables are in the mode of the kernel's: the CPU's.
        let space =
            AddressSpace::with_config(k.kernel.memory().clone(), dtb, k.kernel.paging(), config);
        // SAFETY: checked non-NULL above.
        unsafe { leechio_space { space }.give(out) };
        Ok(())
    })
}
