//! Taint: why the kernel, or a module, is no longer what was built
//! (`Documentation/admin-guide/tainted-kernels.rst`). The bits are the
//! kernel's ABI (`/proc/sys/kernel/tainted` prints them as a number), the
//! same on every version; each has its letter, and only some are a
//! module's own (what `/proc/modules` shows in parentheses and
//! `/sys/module/NAME/taint` shows).

/// The kernel symbol of its taint mask (`unsigned long tainted_mask`).
pub(crate) const TAINT_SYMBOL: &str = "tainted_mask";

/// Each taint bit's letter, and whether a module can carry it
/// (`taint_flags` in `kernel/panic.c`).
const FLAGS: [(char, bool); 20] = [
    ('P', true),  // 0 a proprietary module
    ('F', true),  // 1 a module loaded by force
    ('S', false), // 2 a CPU out of specification
    ('R', false), // 3 a module unloaded by force
    ('M', false), // 4 a machine check
    ('B', false), // 5 a bad page
    ('U', false), // 6 asked for by the user
    ('D', false), // 7 the kernel died (oops)
    ('A', false), // 8 an ACPI table overridden
    ('W', false), // 9 a warning
    ('C', true),  // 10 a staging driver
    ('I', false), // 11 a firmware bug worked around
    ('O', true),  // 12 an out-of-tree module
    ('E', true),  // 13 an unsigned module
    ('L', false), // 14 a soft lockup
    ('K', true),  // 15 live patched
    ('X', true),  // 16 auxiliary (distributions' own)
    ('T', true),  // 17 built with struct randomisation
    ('N', true),  // 18 a test module
    ('J', false), // 19 fwctl used
];

/// A module's taint letters as `/proc/modules` shows them between its
/// parentheses (without them): the letters of its bits a module can
/// carry, in bit order.
pub fn module_taint_letters(taints: u64) -> String {
    FLAGS
        .iter()
        .enumerate()
        .filter(|(bit, (_, module))| *module && taints & (1 << bit) != 0)
        .map(|(_, (letter, _))| *letter)
        .collect()
}

/// The kernel's taint mask in letters: each bit set, in bit order, as its
/// letter, or `bitN` for a bit this table does not know (a kernel newer
/// than it); empty when untainted.
pub fn kernel_taint_letters(mask: u64) -> String {
    (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| match FLAGS.get(bit) {
            Some((letter, _)) => letter.to_string(),
            None => format!(" bit{bit} "),
        })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_in_bit_order_a_module_only_its_own() {
        // Unsigned and out of tree: (OE), as /proc/modules prints it.
        assert_eq!(module_taint_letters(1 << 12 | 1 << 13), "OE");
        // A warning is the kernel's, never a module's.
        assert_eq!(module_taint_letters(1 << 9), "");
        assert_eq!(kernel_taint_letters(1 << 9 | 1 << 13), "WE");
        assert_eq!(kernel_taint_letters(0), "");
        assert_eq!(kernel_taint_letters(1 | 1 << 40), "P bit40");
    }
}
