//! Locks that stay usable after a holder panicked.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A lock taken whether or not a former holder panicked. Every critical
/// section in leechio leaves what it guards consistent at each step (or
/// guarded by a generation that a later reader checks), so a panic inside
/// one (a caller's callback, a bug) must not make every later access
/// panic too: across the plugin and C boundaries that would be an abort.
pub(crate) trait LockRecovering<T> {
    /// The guard, poisoned or not.
    fn lock_recovering(&self) -> MutexGuard<'_, T>;
}

impl<T> LockRecovering<T> for Mutex<T> {
    fn lock_recovering(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_whose_holder_panicked_is_still_taken() {
        let m = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let _held = m.lock().unwrap();
            panic!("holder panics");
        });
        assert!(m.is_poisoned());
        *m.lock_recovering() += 1;
        assert_eq!(*m.lock_recovering(), 2);
    }
}
