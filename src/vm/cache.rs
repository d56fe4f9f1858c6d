//! Caches for translation: recent translations and page-table pages, each
//! with a validity time so a live target's changes are seen.

use crate::lock::LockRecovering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

/// Settings of one cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Whether the cache is used at all.
    pub enabled: bool,
    /// How long an entry is trusted after it was read.
    pub validity: Duration,
    /// Most entries kept; the cache starts over when full.
    pub capacity: usize,
}

impl CacheConfig {
    /// A cache that is never used.
    pub const DISABLED: CacheConfig = CacheConfig {
        enabled: false,
        validity: Duration::ZERO,
        capacity: 0,
    };

    /// An enabled cache trusting entries for `validity`.
    pub fn valid_for(validity: Duration, capacity: usize) -> Self {
        CacheConfig {
            enabled: true,
            validity,
            capacity,
        }
    }
}

/// A map whose entries expire.
#[derive(Debug)]
pub(crate) struct TimedCache<V> {
    config: CacheConfig,
    entries: Mutex<Entries<V>>,
}

#[derive(Debug)]
struct Entries<V> {
    /// Counts invalidations: a value read before one must not be stored
    /// after it.
    generation: u64,
    map: FxHashMap<u64, (Instant, V)>,
}

impl<V: Clone> TimedCache<V> {
    pub fn new(config: CacheConfig) -> Self {
        TimedCache {
            config,
            entries: Mutex::new(Entries {
                generation: 0,
                map: FxHashMap::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<V>> {
        self.entries.lock_recovering()
    }

    /// The current generation: take it before reading what `insert` will
    /// store.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The value for `key`, if present and still valid.
    pub fn get(&self, key: u64) -> Option<V> {
        if !self.config.enabled {
            return None;
        }
        let entries = self.lock();
        let (at, value) = entries.map.get(&key)?;
        (at.elapsed() < self.config.validity).then(|| value.clone())
    }

    /// The value for `key`, if present, however old: for what a read now
    /// in progress found moments ago (an invalidation still removes it).
    pub fn get_any_age(&self, key: u64) -> Option<V> {
        if !self.config.enabled {
            return None;
        }
        self.lock().map.get(&key).map(|(_, value)| value.clone())
    }

    /// Stores `value`, read in generation `read_in`, unless the cache was
    /// invalidated since.
    pub fn insert(&self, read_in: u64, key: u64, value: V) {
        if !self.config.enabled {
            return;
        }
        let mut entries = self.lock();
        if entries.generation != read_in {
            return;
        }
        if entries.map.len() >= self.config.capacity {
            entries.map.clear();
        }
        entries.map.insert(key, (Instant::now(), value));
    }

    pub fn invalidate(&self) {
        let mut entries = self.lock();
        entries.generation += 1;
        entries.map.clear();
    }
}

/// A cached page-table page.
pub(crate) type TablePage = Arc<[u8]>;
