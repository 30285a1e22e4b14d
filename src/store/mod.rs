//! Persistence: one `Store` trait with a PostgreSQL and a SQLite implementation, each with its own
//! migrations and native types. The backend is chosen by the database URL's scheme.

mod cache;
mod postgres;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::{LogLevel, Principal, SessionId};

pub use cache::SessionCache;
pub use postgres::{NOTIFY_CHANNEL, PostgresStore};
pub use sqlite::SqliteStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("database not ready: {0}")]
    NotReady(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// An MCP session as persisted at `initialize`.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    pub id: SessionId,
    pub principal: Principal,
    pub protocol_version: String,
    pub client_info: Value,
    pub client_capabilities: Value,
    pub log_level: Option<LogLevel>,
    pub created_at: DateTime<Utc>,
}

/// One message queued for a session's standalone SSE stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub message: Value,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    fn backend(&self) -> Backend;

    /// Applies the backend's pending migrations.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// The database answers and every embedded migration has been applied.
    async fn check_ready(&self) -> Result<(), StoreError>;

    async fn create_session(&self, session: &SessionRecord) -> Result<(), StoreError>;

    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError>;

    /// Ends a session and drops its events; false when there was none.
    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError>;

    /// False when the session does not exist (any more).
    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, StoreError>;

    /// Records that these sessions were used at `at` (batched by the caller).
    async fn touch_sessions(&self, ids: &[SessionId], at: DateTime<Utc>) -> Result<(), StoreError>;

    /// Ends the sessions last used before `cutoff`; returns their ids.
    async fn delete_idle_sessions(&self, cutoff: DateTime<Utc>) -> Result<Vec<SessionId>, StoreError>;

    /// Appends a message to the session's event log in one transaction and returns its sequence
    /// number, or `None` when the session no longer exists. On PostgreSQL the same transaction
    /// notifies every replica.
    async fn append_event(&self, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError>;

    /// Events with a sequence number above `after`, oldest first, at most `limit`.
    async fn events_after(&self, session: &SessionId, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError>;

    /// Where a stream opened without `Last-Event-ID` starts: the newest event already written to
    /// a stream. `None` when the session does not exist.
    async fn delivered_seq(&self, session: &SessionId) -> Result<Option<i64>, StoreError>;

    /// Claims the events after `from` up to `to` for the calling stream: true when the delivered
    /// mark was still `from` and is now `to`, false when another stream claimed them first. This is
    /// how each new event is written to only one of a session's streams, across replicas.
    async fn claim_delivery(&self, session: &SessionId, from: i64, to: i64) -> Result<bool, StoreError>;
}

/// An opened database: the store, and on PostgreSQL the pool the bus listens on.
pub struct Database {
    pub store: Arc<dyn Store>,
    pub postgres: Option<sqlx::PgPool>,
}

/// Opens the database named by `url` (`postgres://`, `postgresql://` or `sqlite:`).
pub async fn connect(url: &str, max_connections: u32) -> Result<Database, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = PostgresStore::connect(url, max_connections).await?;
        let pool = store.pool().clone();
        Ok(Database {
            store: Arc::new(store),
            postgres: Some(pool),
        })
    } else {
        let store = SqliteStore::connect(url, max_connections).await?;
        Ok(Database {
            store: Arc::new(store),
            postgres: None,
        })
    }
}

fn parse_log_level(text: Option<String>) -> Result<Option<LogLevel>, StoreError> {
    text.map(|t| t.parse::<LogLevel>().map_err(StoreError::Corrupt))
        .transpose()
}

fn parse_session_id(text: &str) -> Result<SessionId, StoreError> {
    text.parse()
        .map_err(|_| StoreError::Corrupt(format!("session id {text:?} is malformed")))
}

fn parse_principal(text: &str) -> Result<Principal, StoreError> {
    Principal::parse(text).map_err(|e| StoreError::Corrupt(format!("principal: {e}")))
}

/// Checks that every embedded migration is recorded as applied, successfully.
fn check_migrations(migrator: &sqlx::migrate::Migrator, applied: &[(i64, bool)]) -> Result<(), StoreError> {
    for migration in migrator.iter() {
        match applied.iter().find(|(version, _)| *version == migration.version) {
            Some((_, true)) => {}
            Some((_, false)) => {
                return Err(StoreError::NotReady(format!(
                    "migration {} failed part-way",
                    migration.version
                )));
            }
            None => {
                return Err(StoreError::NotReady(format!(
                    "migration {} is not applied",
                    migration.version
                )));
            }
        }
    }
    Ok(())
}
