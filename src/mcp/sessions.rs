//! Sessions as the transport sees them: created at `initialize`, found through the cache, ended by
//! DELETE, by idleness, or by a newer one of their principal beyond its cap. Use is recorded in memory and written in batches, so a request costs no
//! write.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use crate::clock::before;
use crate::domain::{LogLevel, SessionId};
use crate::events::Bus;
use crate::metrics::Metrics;
use crate::store::{SessionCache, SessionRecord, Store, StoreError};

pub struct Sessions {
    store: Arc<dyn Store>,
    cache: Arc<SessionCache>,
    bus: Arc<Bus>,
    used: Mutex<HashSet<SessionId>>,
    /// Live sessions one principal may hold (`mcp.max_sessions_per_principal`).
    max_per_principal: usize,
}

impl Sessions {
    pub fn new(store: Arc<dyn Store>, cache: Arc<SessionCache>, bus: Arc<Bus>, max_per_principal: usize) -> Self {
        Self {
            store,
            cache,
            bus,
            used: Mutex::new(HashSet::new()),
            max_per_principal,
        }
    }

    /// Stores a new session; beyond the principal's cap, its least recently used sessions end
    /// (their streams too, on every replica). Returns the new session and the ended ones' ids.
    pub async fn create(&self, record: SessionRecord) -> Result<(Arc<SessionRecord>, Vec<SessionId>), StoreError> {
        let ended = self.store.create_session(&record, self.max_per_principal).await?;
        for id in &ended {
            self.bus.session_changed(id);
        }
        let record = Arc::new(record);
        self.cache.insert(record.id.clone(), record.clone());
        Ok((record, ended))
    }

    pub async fn find(&self, id: &SessionId) -> Result<Option<Arc<SessionRecord>>, StoreError> {
        let record = match self.cache.get(id) {
            Some(record) => Some(record),
            None => {
                let epoch = self.cache.epoch();
                let record = self.store.session(id).await?.map(Arc::new);
                if let Some(record) = &record {
                    self.cache.insert_loaded(epoch, record.id.clone(), record.clone());
                }
                record
            }
        };
        if record.is_some() {
            self.used
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.clone());
        }
        Ok(record)
    }

    pub async fn end(&self, id: &SessionId) -> Result<bool, StoreError> {
        let ended = self.store.delete_session(id).await?;
        self.bus.session_changed(id);
        Ok(ended)
    }

    pub async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, StoreError> {
        let changed = self.store.set_log_level(id, level).await?;
        self.bus.session_changed(id);
        Ok(changed)
    }

    fn take_used(&self) -> Vec<SessionId> {
        std::mem::take(&mut *self.used.lock().unwrap_or_else(PoisonError::into_inner))
            .into_iter()
            .collect()
    }
}

/// How often use is written and idle sessions are ended.
const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(30);

/// Writes session use (requests and open streams count), ends idle sessions and counts the live
/// ones for the metrics, until shutdown.
pub async fn maintain(
    sessions: Arc<Sessions>,
    bus: Arc<Bus>,
    metrics: Arc<Metrics>,
    idle_timeout: Duration,
    shutdown: CancellationToken,
) {
    let mut interval = tokio::time::interval(MAINTENANCE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = interval.tick() => {}
        }
        let mut used = sessions.take_used();
        used.extend(bus.sessions_with_streams());
        used.sort_unstable();
        used.dedup();
        if !used.is_empty()
            && let Err(error) = sessions.store.touch_sessions(&used, Utc::now()).await
        {
            tracing::warn!(%error, sessions = used.len(), "could not record session use");
        }
        let cutoff = before(Utc::now(), idle_timeout);
        match sessions.store.delete_idle_sessions(cutoff).await {
            Ok(ended) => {
                for id in &ended {
                    bus.session_changed(id);
                }
                if !ended.is_empty() {
                    tracing::info!(sessions = ended.len(), "ended idle sessions");
                }
            }
            Err(error) => tracing::warn!(%error, "could not end idle sessions"),
        }
        if metrics.is_on() {
            match sessions.store.count_sessions().await {
                Ok(count) => metrics.set_sessions_active(count),
                Err(error) => tracing::warn!(%error, "could not count sessions"),
            }
        }
    }
    // Use seen since the last tick is written once more so a restart does not lose it.
    let used = sessions.take_used();
    if !used.is_empty()
        && let Err(error) = sessions.store.touch_sessions(&used, Utc::now()).await
    {
        tracing::warn!(%error, "could not record session use at shutdown");
    }
}
