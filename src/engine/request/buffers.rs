//! Spare engine buffers, pooled by size class, so that a request
//! allocates nothing once the engine has grown to its working size.

/// A buffer above this size is not left under a request of a quarter of
/// its size.
pub(in crate::engine) const LARGE_BUFFER: usize = 64 << 10;

/// Most spare buffers kept; more are freed.
pub(in crate::engine) const MAX_SPARE: usize = 4096;

/// Spare engine buffers by size class (a buffer of capacity `c` is in
/// class `log2(c)`), so that finding one that fits costs a few steps
/// however many are kept.
#[derive(Debug, Default)]
pub(crate) struct SpareBuffers {
    pub(in crate::engine) classes: Vec<Vec<Vec<u8>>>,
    pub(in crate::engine) count: usize,
}

impl SpareBuffers {
    /// Keeps `buf` (unless it is empty or enough are kept already).
    pub(in crate::engine) fn put(&mut self, buf: Vec<u8>) {
        if buf.capacity() == 0 || self.count >= MAX_SPARE {
            return;
        }
        let class = buf.capacity().ilog2() as usize;
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, Vec::new);
        }
        self.classes[class].push(buf);
        self.count += 1;
    }

    /// A buffer of at least `len` bytes' capacity, from the smallest class
    /// whose every buffer is large enough.
    pub(in crate::engine) fn take_fit(&mut self, len: usize) -> Option<Vec<u8>> {
        let buf = self
            .classes
            .get_mut(fit_class(len)..)?
            .iter_mut()
            .find_map(Vec::pop)?;
        self.count -= 1;
        Some(buf)
    }

    /// Whether a buffer of `len` bytes' capacity would be found.
    pub(in crate::engine) fn has_fit(&self, len: usize) -> bool {
        self.classes
            .get(fit_class(len)..)
            .is_some_and(|c| c.iter().any(|class| !class.is_empty()))
    }

    /// Moves `other`'s buffers here.
    pub(in crate::engine) fn take_all(&mut self, other: &mut SpareBuffers) {
        for class in &mut other.classes {
            for buf in class.drain(..) {
                self.put(buf);
            }
        }
        other.count = 0;
    }
}

/// The first size class whose every buffer holds `len` bytes.
pub(in crate::engine) fn fit_class(len: usize) -> usize {
    len.max(1).next_power_of_two().ilog2() as usize
}
