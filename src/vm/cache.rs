//! Caches for translation: recent translations and page-table pages, each
//! with a validity time so a live target's changes are seen.

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
    map: Mutex<FxHashMap<u64, (Instant, V)>>,
}

impl<V: Clone> TimedCache<V> {
    pub fn new(config: CacheConfig) -> Self {
        TimedCache {
            config,
            map: Mutex::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The value for `key`, if present and still valid.
    pub fn get(&self, key: u64) -> Option<V> {
        if !self.config.enabled {
            return None;
        }
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let (at, value) = map.get(&key)?;
        (at.elapsed() < self.config.validity).then(|| value.clone())
    }

    pub fn insert(&self, key: u64, value: V) {
        if !self.config.enabled {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.config.capacity {
            map.clear();
        }
        map.insert(key, (Instant::now(), value));
    }

    pub fn invalidate(&self) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// A cached page-table page.
pub(crate) type TablePage = Arc<[u8]>;
