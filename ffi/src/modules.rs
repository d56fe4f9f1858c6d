//! A Linux target's loaded kernel modules, as `/proc/modules` lists them.

use std::ffi::{c_char, c_void, CString};

use leechio_rs::linux::{Module, ModuleList};

use crate::error::{guard, Fail};
use crate::handle::Handle;
use crate::leechio_status::{self, *};
use crate::processes::leechio_kernel;

/// One loaded module, as `leechio_kernel_modules` reports it. The strings
/// are valid only during the callback.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct leechio_module {
    /// Kernel address of its `struct module`.
    pub address: u64,
    /// Where its code starts (`/proc/modules`' address).
    pub base: u64,
    /// Bytes of its memory, as `/proc/modules` adds them up.
    pub size: u64,
    /// Its name, NUL-terminated.
    pub name: *const c_char,
    /// Its state in `/proc/modules`' words: "Live", "Loading",
    /// "Unloading", or "Unformed" (one `/proc/modules` leaves out);
    /// "unknown (N)" for a value the kernel's enum does not have.
    pub state: *const c_char,
}

/// Called once per module, in the kernel's list order (the newest
/// first, as `/proc/modules`). `module` and its strings are valid only
/// during the call.
///
/// It runs on the thread that made the call, before the call returns, and
/// may call any function of this library, on the same handles too, except
/// freeing the handle the running call was given.
pub type leechio_module_fn =
    Option<unsafe extern "C" fn(context: *mut c_void, module: *const leechio_module)>;

/// Why a list is incomplete, or `Ok`.
fn list_result(list: &ModuleList) -> Result<(), Fail> {
    match list.failed.first() {
        None => Ok(()),
        Some(first) => Err(Fail::new(
            LEECHIO_INCOMPLETE,
            format!(
                "{} item(s) could not be read, so {} modules are listed; first: {:#x}: {}",
                list.failed.len(),
                list.modules.len(),
                first.address,
                first.reason
            ),
        )),
    }
}

/// Lists the kernel's loaded modules from its `modules` list (walked from
/// both ends: a device call per two modules, plus one for the list's
/// head), calling `on_module` for each in list order. Returns
/// `LEECHIO_OK`, or `LEECHIO_INCOMPLETE` when the list could not be found
/// or read whole, or did not hold together (a loop, a torn link): the
/// message says how many items failed and the first; the modules reported
/// stand.
///
/// NULL: `context` may be NULL (it is only passed on); `kernel` and
/// `on_module` may not (`LEECHIO_NULL_ARGUMENT`).
///
/// # Safety
/// `kernel` must be a live handle; `on_module` safe to call with
/// `context`.
#[no_mangle]
pub unsafe extern "C" fn leechio_kernel_modules(
    kernel: *const leechio_kernel,
    on_module: leechio_module_fn,
    context: *mut c_void,
) -> leechio_status {
    guard("leechio_kernel_modules", || {
        // SAFETY: the caller's contract.
        let k = unsafe { leechio_kernel::lend(kernel)? };
        let Some(callback) = on_module else {
            return Err(Fail::new(LEECHIO_NULL_ARGUMENT, "`on_module` is NULL"));
        };
        let list = k.kernel.modules();
        for m in &list.modules {
            report(m, |record| {
                // SAFETY: the caller vouches for the callback; `record`
                // and its strings live until it returns.
                unsafe { callback(context, record) }
            });
        }
        list_result(&list)
    })
}

/// Calls `f` with the C record of `m`, whose strings live meanwhile.
fn report(m: &Module, f: impl FnOnce(&leechio_module)) {
    // A module's name ends at its first NUL (cut there when read): none
    // inside. Its other bytes are passed as the kernel keeps them.
    let name = CString::new(m.name.as_str()).unwrap_or_default();
    let state = CString::new(m.state.to_string()).unwrap_or_default();
    f(&leechio_module {
        address: m.address,
        base: m.base,
        size: m.size,
        name: name.as_ptr(),
        state: state.as_ptr(),
    });
}
