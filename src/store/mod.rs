//! Persistence: one `Store` trait and its sub-traits, each with its records in a module of its own
//! job, implemented once (`sql`) for both backends, PostgreSQL and SQLite, each of which supplies
//! its dialect (`postgres`, `sqlite`) and its own migrations. The backend is chosen by the database
//! URL's scheme. Both read rows back the same way (`rows`); the payloads of the PostgreSQL bus are
//! defined in `notice`, the walk over every sealed value (for key rotation) in `sealed`, and leases
//! and the retention sweep's bounded deletes in `retention`.

mod admin;
mod approvals;
mod audit;
mod browser_sessions;
mod cache;
mod catalogues;
mod connections;
mod elicitations;
mod forms;
pub mod migrations;
mod notice;
mod postgres;
pub mod principals;
mod registrations;
mod retention;
mod rows;
mod sealed;
mod sessions;
mod sql;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::{ElicitationId, LogLevel, SessionId};

pub use admin::{AdminStore, ConnectionOrder, Window};
pub use approvals::{ApprovalStore, VoteRecord};
pub use audit::{AuditAction, AuditEntry, AuditQuery, AuditRecord, AuditSearch, AuditStore};
pub use browser_sessions::{BrowserSessionRecord, BrowserSessionStore};
pub use cache::{Cache, ConnectionCache, SessionCache};
pub use catalogues::{CatalogueRecord, CatalogueStore};
pub use connections::{ConnectionRecord, ConnectionStatus, ConnectionStore, RefreshLease, RefreshedTokens};
pub use elicitations::{AskKey, AskScope, BoundCall, ElicitationRecord, ElicitationStatus, Ending, OAuthFlowRecord};
pub use forms::{FormAnswerRecord, FormStore, FormValuesRecord};
pub use notice::{ClientAction, NOTIFY_CHANNEL, Notice};
pub use postgres::PostgresStore;
pub use principals::PrincipalStore;
pub use registrations::{RegistrationRecord, RegistrationStore};
pub use retention::{Lease, RetentionStore};
pub use sealed::{SealedRow, SealedRowKey, SealedStore, SealedTable, StampCount};
pub use sessions::{SessionRecord, StoredEvent, TakenEvents};
pub use sqlite::SqliteStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached right now (see [`is_outage`]); the request may be retried.
    #[error("database unavailable: {0}")]
    Unavailable(sqlx::Error),
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("database not ready: {0}")]
    NotReady(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        if is_outage(&error) {
            StoreError::Unavailable(error)
        } else {
            StoreError::Database(error)
        }
    }
}

impl StoreError {
    /// The database cannot be reached right now: a retry later may succeed.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// No pool connection was free within the acquire timeout. With the database answering
    /// (see `Bus::is_overloaded`) that is an overload: every connection is in use.
    pub fn is_pool_timeout(&self) -> bool {
        matches!(self, StoreError::Unavailable(sqlx::Error::PoolTimedOut))
    }
}

/// PostgreSQL's SQLSTATE class of connection exceptions (`08...`), and the codes of a server
/// going away: admin_shutdown, crash_shutdown, cannot_connect_now.
const OUTAGE_SQLSTATE_CLASS: &str = "08";
const OUTAGE_SQLSTATES: [&str; 3] = ["57P01", "57P02", "57P03"];

/// Whether `error` says the database is unreachable (no connection within the pool's acquire
/// timeout, a connection refused or cut, a server shutting down) rather than that a statement
/// failed.
fn is_outage(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => database
            .code()
            .is_some_and(|code| code.starts_with(OUTAGE_SQLSTATE_CLASS) || OUTAGE_SQLSTATES.contains(&code.as_ref())),
        _ => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// The database pool as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections open, idle or in use.
    pub open: u32,
    pub idle: usize,
    /// The most connections the pool opens.
    pub max: u32,
}

#[async_trait]
pub trait Store:
    ConnectionStore
    + FormStore
    + CatalogueStore
    + RegistrationStore
    + ApprovalStore
    + BrowserSessionStore
    + SealedStore
    + AuditStore
    + RetentionStore
    + AdminStore
    + PrincipalStore
    + Send
    + Sync
    + 'static
{
    fn backend(&self) -> Backend;

    /// The connection pool's state, without touching the database.
    fn pool_stats(&self) -> PoolStats;

    /// Applies the backend's pending migrations.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// The database answers and every embedded migration has been applied.
    async fn check_ready(&self) -> Result<(), StoreError>;

    /// Stores a new session and, in the same transaction, ends its principal's least recently
    /// used sessions beyond `max_per_principal` (never the new one) with their events; returns
    /// the ended sessions' ids. A principal's creations take turns, on every replica (on
    /// PostgreSQL an advisory lock, announcing the ended sessions), so concurrent ones never
    /// leave more.
    async fn create_session(
        &self,
        session: &SessionRecord,
        max_per_principal: usize,
    ) -> Result<Vec<SessionId>, StoreError>;

    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError>;

    /// Ends a session and drops its events; false when there was none.
    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError>;

    /// False when the session does not exist (any more).
    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, StoreError>;

    /// Records that these sessions were used at `at` (batched by the caller).
    async fn touch_sessions(&self, ids: &[SessionId], at: DateTime<Utc>) -> Result<(), StoreError>;

    /// How many sessions exist (for the `sessions_active` gauge).
    async fn count_sessions(&self) -> Result<i64, StoreError>;

    /// Ends the sessions last used before `cutoff`; returns their ids.
    async fn delete_idle_sessions(&self, cutoff: DateTime<Utc>) -> Result<Vec<SessionId>, StoreError>;

    /// Appends a message to the session's event log in one transaction and returns its sequence
    /// number, or `None` when the session no longer exists. On PostgreSQL the same transaction
    /// notifies every replica.
    async fn append_event(&self, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError>;

    /// Events with a sequence number above `after`, oldest first, at most `limit`; `None` when the
    /// session no longer exists. One statement, so a stream woken by its session's end learns it
    /// from the read it makes anyway.
    async fn events_after(
        &self,
        session: &SessionId,
        after: i64,
        limit: i64,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError>;

    /// The events [`events_after`](Store::events_after) reads, claimed as
    /// [`claim_delivery`](Store::claim_delivery) claims them (from `after` to the last one) when
    /// there are some: what a stream does with each wake-up, in one statement where the dialect
    /// allows it. `None` when the session no longer exists.
    async fn take_events_after(
        &self,
        session: &SessionId,
        after: i64,
        limit: i64,
    ) -> Result<Option<TakenEvents>, StoreError>;

    /// Where a stream opened without `Last-Event-ID` starts: the newest event already written to
    /// a stream. `None` when the session does not exist.
    async fn delivered_seq(&self, session: &SessionId) -> Result<Option<i64>, StoreError>;

    /// Stores a new pending elicitation, or returns the one already pending and unexpired for the
    /// same ask (two concurrent calls get the same one). One pending past its expiry is marked
    /// expired first and never handed out again. `None`, and nothing stored, when the principal
    /// already has `max_pending` pending and unexpired elicitations; a principal's insertions take
    /// turns (on every replica), so concurrent ones never exceed it.
    async fn insert_elicitation(
        &self,
        elicitation: &ElicitationRecord,
        max_pending: usize,
    ) -> Result<Option<ElicitationRecord>, StoreError>;

    /// The elicitation for this ask that is pending and unexpired at `now`.
    async fn pending_elicitation(
        &self,
        ask: AskKey<'_>,
        now: DateTime<Utc>,
    ) -> Result<Option<ElicitationRecord>, StoreError>;

    async fn elicitation(&self, id: &ElicitationId) -> Result<Option<ElicitationRecord>, StoreError>;

    /// Moves the ending elicitation, when pending and unexpired, to `status` and appends the
    /// ending's notification to its session's event log, in one transaction. False (and nothing
    /// changed) when it was not pending: finishing twice sends nothing the second time.
    async fn finish_elicitation(&self, ending: Ending<'_>, status: ElicitationStatus) -> Result<bool, StoreError>;

    /// The newest declined elicitation for this ask that no call has reported yet, now marked
    /// reported.
    async fn take_unreported_decline(&self, ask: AskKey<'_>) -> Result<Option<ElicitationRecord>, StoreError>;

    /// The newest expired elicitation for this ask that no call has reported yet, now marked
    /// reported (an approval request nobody decided in time).
    async fn take_unreported_expiry(&self, ask: AskKey<'_>) -> Result<Option<ElicitationRecord>, StoreError>;

    /// Marks pending elicitations past their expiry as expired; returns them.
    async fn expire_elicitations(&self, now: DateTime<Utc>) -> Result<Vec<ElicitationRecord>, StoreError>;

    /// Marks this ask's pending elicitations past their expiry at `now` as expired (the sweeper has
    /// not reached them yet); returns them.
    async fn expire_overdue_ask(
        &self,
        ask: AskKey<'_>,
        now: DateTime<Utc>,
    ) -> Result<Vec<ElicitationRecord>, StoreError>;

    async fn insert_flow(&self, flow: &OAuthFlowRecord) -> Result<(), StoreError>;

    async fn flow(&self, state_hash: &str) -> Result<Option<OAuthFlowRecord>, StoreError>;

    /// Marks an unused, unexpired flow used; false when it was used or expired (single use).
    async fn consume_flow(&self, state_hash: &str, now: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Drops flows that expired before `cutoff`.
    async fn delete_stale_flows(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Drops call-scoped answers stored before `cutoff` that no call took: the call they were for
    /// was not retried, and their secrets should not outlive it.
    async fn delete_untaken_answers(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Claims the events after `from` up to `to` for the calling stream: true when the delivered
    /// mark was still `from` and is now `to`, false when another stream claimed them first. This is
    /// how each new event is written to only one of a session's streams, across replicas.
    async fn claim_delivery(&self, session: &SessionId, from: i64, to: i64) -> Result<bool, StoreError>;

    /// Sends a notice (a [`Notice::encode`] payload) to every replica's bus (PostgreSQL NOTIFY). On
    /// SQLite there is one process and the bus delivers in process, so this does nothing.
    async fn broadcast(&self, payload: &str) -> Result<(), StoreError>;
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

/// A count or cap as SQL binds it.
fn sql_count(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Checks that every embedded migration is recorded as applied, successfully; the error names
/// every one that is not.
fn check_migrations(migrator: &sqlx::migrate::Migrator, applied: &[(i64, bool)]) -> Result<(), StoreError> {
    let mut failed = Vec::new();
    let mut pending = Vec::new();
    for migration in migrator.iter() {
        match applied.iter().find(|(version, _)| *version == migration.version) {
            Some((_, true)) => {}
            Some((_, false)) => failed.push(migration.version.to_string()),
            None => pending.push(migration.version.to_string()),
        }
    }
    let mut reasons = Vec::new();
    if !failed.is_empty() {
        reasons.push(format!("migrations failed part-way: {}", failed.join(", ")));
    }
    if !pending.is_empty() {
        reasons.push(format!("migrations not applied: {}", pending.join(", ")));
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(StoreError::NotReady(reasons.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_database_is_told_apart_from_a_failed_statement() {
        let refused = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(StoreError::from(refused).is_unavailable());
        assert!(StoreError::from(sqlx::Error::PoolTimedOut).is_unavailable());
        assert!(!StoreError::from(sqlx::Error::RowNotFound).is_unavailable());
        assert!(!StoreError::from(sqlx::Error::Protocol("unexpected message".into())).is_unavailable());
    }
}
