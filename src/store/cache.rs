//! A read cache of sessions, so the hot path of every MCP request costs no query. A session only
//! changes through `logging/setLevel` or when it ends; every such change is announced on the bus
//! (on PostgreSQL to every replica) and invalidates the entry, and a lost bus connection clears
//! the whole cache because announcements may have been missed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::SessionRecord;
use crate::domain::SessionId;

pub struct SessionCache {
    entries: Mutex<HashMap<SessionId, Arc<SessionRecord>>>,
    capacity: usize,
}

impl SessionCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity,
        }
    }

    pub fn get(&self, id: &SessionId) -> Option<Arc<SessionRecord>> {
        self.lock().get(id).cloned()
    }

    pub fn insert(&self, record: Arc<SessionRecord>) {
        let mut entries = self.lock();
        // Bounded without bookkeeping: a full cache starts over and refills from the database.
        if entries.len() >= self.capacity {
            entries.clear();
        }
        entries.insert(record.id.clone(), record);
    }

    pub fn invalidate(&self, id: &SessionId) {
        self.lock().remove(id);
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Arc<SessionRecord>>> {
        // The map holds no invariant a panicking holder could break, so a poisoned lock is usable.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Principal;

    fn record() -> Arc<SessionRecord> {
        Arc::new(SessionRecord {
            id: SessionId::generate(),
            principal: Principal::parse("alice").expect("principal"),
            protocol_version: "2025-11-25".into(),
            client_info: serde_json::json!({}),
            client_capabilities: serde_json::json!({}),
            log_level: None,
            created_at: chrono::Utc::now(),
        })
    }

    #[test]
    fn invalidation_and_capacity() {
        let cache = SessionCache::new(2);
        let (a, b, c) = (record(), record(), record());
        cache.insert(a.clone());
        cache.insert(b.clone());
        assert!(cache.get(&a.id).is_some());
        cache.invalidate(&a.id);
        assert!(cache.get(&a.id).is_none());
        cache.insert(a.clone());
        cache.insert(c.clone());
        assert!(cache.get(&c.id).is_some(), "the newest entry survives a full cache");
        cache.clear();
        assert!(cache.get(&c.id).is_none());
    }
}
