//! Read caches, so the hot path of an MCP request costs no query. Sessions only change through
//! `logging/setLevel` or when they end; a principal's connections only change when a sign-in,
//! refresh, failure or disconnect writes them. Every such change is announced on the bus (on
//! PostgreSQL to every replica) and invalidates the entry, and a lost bus connection clears the
//! caches because announcements may have been missed.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{ConnectionRecord, SessionRecord};
use crate::domain::{Principal, SessionId};

pub struct Cache<K, V> {
    entries: Mutex<HashMap<K, Arc<V>>>,
    capacity: usize,
    /// Bumped by every invalidation, so a value loaded before one is not cached after it.
    epoch: AtomicU64,
}

pub type SessionCache = Cache<SessionId, SessionRecord>;
/// A principal's connections, all providers.
pub type ConnectionCache = Cache<Principal, Vec<ConnectionRecord>>;

impl<K: Eq + Hash, V> Cache<K, V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity,
            epoch: AtomicU64::new(0),
        }
    }

    /// Read before loading a value from the database; pass to `insert_loaded`.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Caches a value loaded when the epoch was `epoch`, unless something was invalidated since
    /// (the value may predate that change).
    pub fn insert_loaded(&self, epoch: u64, key: K, value: Arc<V>) {
        let mut entries = self.lock();
        if self.epoch.load(Ordering::Acquire) == epoch {
            if entries.len() >= self.capacity {
                entries.clear();
            }
            entries.insert(key, value);
        }
    }

    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        self.lock().get(key).cloned()
    }

    pub fn insert(&self, key: K, value: Arc<V>) {
        let mut entries = self.lock();
        // Bounded without bookkeeping: a full cache starts over and refills from the database.
        if entries.len() >= self.capacity {
            entries.clear();
        }
        entries.insert(key, value);
    }

    pub fn invalidate(&self, key: &K) {
        let mut entries = self.lock();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        entries.remove(key);
    }

    pub fn clear(&self) {
        let mut entries = self.lock();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Arc<V>>> {
        // The map holds no invariant a panicking holder could break, so a poisoned lock is usable.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidation_and_capacity() {
        let cache: Cache<u32, &str> = Cache::new(2);
        cache.insert(1, Arc::new("a"));
        cache.insert(2, Arc::new("b"));
        assert_eq!(cache.get(&1).as_deref(), Some(&"a"));
        cache.invalidate(&1);
        assert!(cache.get(&1).is_none());
        cache.insert(1, Arc::new("a"));
        cache.insert(3, Arc::new("c"));
        assert!(cache.get(&3).is_some(), "the newest entry survives a full cache");
        cache.clear();
        assert!(cache.get(&3).is_none());
    }

    #[test]
    fn a_value_loaded_before_an_invalidation_is_not_cached() {
        let cache: Cache<u32, &str> = Cache::new(10);
        let epoch = cache.epoch();
        cache.invalidate(&7);
        cache.insert_loaded(epoch, 7, Arc::new("stale"));
        assert!(cache.get(&7).is_none());
        let epoch = cache.epoch();
        cache.insert_loaded(epoch, 7, Arc::new("fresh"));
        assert_eq!(cache.get(&7).as_deref(), Some(&"fresh"));
    }
}
