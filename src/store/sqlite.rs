//! The embedded store for one process on a laptop: a file in WAL mode. Other processes must not
//! share the file (the bus of a SQLite deployment is in process).

mod admin;
mod audit;
mod browser_sessions;
mod catalogues;
mod connections;
mod forms;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{FromRow, Sqlite, SqlitePool};

use super::rows::{
    BROWSER_SESSION_COLUMNS, CATALOGUE_COLUMNS, CONNECTION_COLUMNS, ELICITATION_COLUMNS, FLOW_COLUMNS,
    FORM_ANSWER_COLUMNS, FORM_VALUES_COLUMNS, Native, SESSION_COLUMNS, Stored, parse_session_id,
};
use super::{
    AskKey, AuditEntry, AuditQuery, AuditRecord, AuditStore, Backend, BrowserSessionRecord, BrowserSessionStore,
    CatalogueRecord, CatalogueStore, ConnectionRecord, ConnectionStore, ElicitationRecord, ElicitationStatus, Ending,
    FormAnswerRecord, FormStore, FormValuesRecord, OAuthFlowRecord, PoolStats, RefreshLease, RefreshedTokens,
    SessionRecord, Store, StoreError, StoredEvent,
};
use crate::domain::{ElicitationId, LogLevel, Principal, SessionId};
use crate::private_file::create_private_file;

type Tx<'a> = sqlx::Transaction<'a, Sqlite>;
type QueryAs<'q, R> = sqlx::query::QueryAs<'q, Sqlite, R, SqliteArguments>;

/// Appends to a session's log inside `tx`. `None`: no such session.
async fn append_in(tx: &mut Tx<'_>, session: &str, message: &Value) -> Result<Option<i64>, StoreError> {
    // The UPDATE takes SQLite's write lock first, so appends to one database are serialized.
    let seq: Option<(i64,)> = sqlx::query_as(
        "UPDATE sessions SET last_event_seq = last_event_seq + 1 WHERE id = ?1 RETURNING last_event_seq",
    )
    .bind(session)
    .fetch_optional(&mut **tx)
    .await?;
    let Some((seq,)) = seq else {
        return Ok(None);
    };
    sqlx::query("INSERT INTO session_events (session_id, seq, message, created_at) VALUES (?1, ?2, ?3, ?4)")
        .bind(session)
        .bind(seq)
        .bind(message.to_string())
        .bind(millis(Utc::now()))
        .execute(&mut **tx)
        .await?;
    Ok(Some(seq))
}

/// Moves a pending elicitation unexpired at `now` to `status` and appends `notification` to its
/// session's log, inside `tx`. False, and nothing changed, when it was not pending.
async fn finish_in(
    tx: &mut Tx<'_>,
    id: &ElicitationId,
    status: ElicitationStatus,
    notification: &Value,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let session: Option<(String,)> = sqlx::query_as(
        "UPDATE elicitations SET status = ?2, completed_at = ?3
         WHERE id = ?1 AND status = 'pending' AND expires_at > ?3 RETURNING session_id",
    )
    .bind(id.to_string())
    .bind(status.as_str())
    .bind(millis(now))
    .fetch_optional(&mut **tx)
    .await?;
    let Some((session,)) = session else {
        return Ok(false);
    };
    append_in(tx, &session, notification).await?;
    Ok(true)
}

/// The elicitation for this ask that is pending and unexpired at `now`.
fn pending_query<'q>(
    ask: AskKey<'q>,
    now: DateTime<Utc>,
) -> QueryAs<'q, <ElicitationRecord as Stored>::Row<SqliteStore>> {
    sqlx::query_as(sql!(
        "SELECT {ELICITATION_COLUMNS} FROM elicitations
         WHERE principal = ?1 AND session_id = ?2 AND requirement = ?3 AND call_key IS ?4 AND status = 'pending'
             AND expires_at > ?5"
    ))
    .bind(ask.principal.as_str())
    .bind(ask.session.as_str())
    .bind(ask.requirement)
    .bind(ask.call_key)
    .bind(millis(now))
}

sealed_store!(
    SqliteStore,
    super::sealed::Syntax {
        placeholder: '?',
        same_as: "IS",
    }
);

retention_store!(SqliteStore, '?', millis);

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?;
        if !in_memory(url) {
            create_private(options.get_filename())?;
        }
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await?;
        Ok(Self { pool })
    }

    /// The record in the row `query` returns, if any.
    async fn record<T: Stored>(&self, query: QueryAs<'_, T::Row<Self>>) -> Result<Option<T>, StoreError>
    where
        T::Row<Self>: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        query.fetch_optional(&self.pool).await?.map(T::read::<Self>).transpose()
    }

    /// The records in the rows `query` returns.
    async fn records<T: Stored>(&self, query: QueryAs<'_, T::Row<Self>>) -> Result<Vec<T>, StoreError>
    where
        T::Row<Self>: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        query
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(T::read::<Self>)
            .collect()
    }
}

/// Whether `url` names an in-memory database, by sqlx's rule (`sqlite::memory:`, `mode=memory`):
/// sqlx does not expose what it parsed, and such a database must not create a file.
fn in_memory(url: &str) -> bool {
    let rest = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
    let (database, params) = rest.split_once('?').unwrap_or((rest, ""));
    database == ":memory:" || url::form_urlencoded::parse(params.as_bytes()).any(|(k, v)| k == "mode" && v == "memory")
}

/// Creates the database file readable by its owner only, unless it exists. SQLite would create
/// it 0644 (less the umask), and the process umask is the operator's, not ours to change; so the
/// file is made here, empty, before sqlx opens it. SQLite gives the `-wal` and `-shm` files it
/// creates beside it the database file's permissions. An existing file keeps its mode.
fn create_private(path: &std::path::Path) -> Result<(), StoreError> {
    match create_private_file(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Database(sqlx::Error::Io(std::io::Error::new(
            e.kind(),
            format!("cannot create the SQLite database {}: {e}", path.display()),
        )))),
    }
}

fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

impl Native for SqliteStore {
    type Time = i64;
    type Json = String;

    fn time(ms: i64) -> Result<DateTime<Utc>, StoreError> {
        Utc.timestamp_millis_opt(ms)
            .single()
            .ok_or_else(|| StoreError::Corrupt(format!("timestamp {ms} out of range")))
    }

    fn json(text: String, what: &str) -> Result<Value, StoreError> {
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn pool_stats(&self) -> PoolStats {
        super::pool_stats(&self.pool)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn check_ready(&self) -> Result<(), StoreError> {
        let table: Option<(String,)> =
            sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'")
                .fetch_optional(&self.pool)
                .await?;
        let applied: Vec<(i64, bool)> = if table.is_some() {
            sqlx::query_as("SELECT version, success FROM _sqlx_migrations")
                .fetch_all(&self.pool)
                .await?
        } else {
            Vec::new()
        };
        super::check_migrations(&MIGRATOR, &applied)
    }

    async fn create_session(
        &self,
        session: &SessionRecord,
        max_per_principal: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let created = millis(session.created_at);
        // The INSERT takes SQLite's write lock, so creations take turns and each counts the others.
        let mut tx = self.pool.begin().await?;
        sqlx::query(sql!(
            "INSERT INTO sessions ({SESSION_COLUMNS}, last_seen_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)"
        ))
        .bind(session.id.as_str())
        .bind(session.principal.as_str())
        .bind(&session.protocol_version)
        .bind(session.client_info.to_string())
        .bind(session.client_capabilities.to_string())
        .bind(session.log_level.map(LogLevel::as_str))
        .bind(created)
        .execute(&mut *tx)
        .await?;
        let ended: Vec<(String,)> = sqlx::query_as(
            "DELETE FROM sessions WHERE id IN (
                 SELECT id FROM sessions WHERE principal = ?1 AND id <> ?2
                 ORDER BY last_seen_at DESC, created_at DESC, id DESC LIMIT -1 OFFSET ?3)
             RETURNING id",
        )
        .bind(session.principal.as_str())
        .bind(session.id.as_str())
        .bind(super::sql_count(max_per_principal.saturating_sub(1)))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        ended.iter().map(|(id,)| parse_session_id(id)).collect()
    }

    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let query = sqlx::query_as(sql!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1")).bind(id.as_str());
        self.record(query).await
    }

    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        let result = sqlx::query("DELETE FROM sessions WHERE id = ?1")
            .bind(id.as_str())
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() > 0)
    }

    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, StoreError> {
        let result = sqlx::query("UPDATE sessions SET log_level = ?2 WHERE id = ?1")
            .bind(id.as_str())
            .bind(level.as_str())
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() > 0)
    }

    async fn touch_sessions(&self, ids: &[SessionId], at: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for id in ids {
            sqlx::query("UPDATE sessions SET last_seen_at = MAX(last_seen_at, ?2) WHERE id = ?1")
                .bind(id.as_str())
                .bind(millis(at))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn count_sessions(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM sessions")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn delete_idle_sessions(&self, cutoff: DateTime<Utc>) -> Result<Vec<SessionId>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as("DELETE FROM sessions WHERE last_seen_at < ?1 RETURNING id")
            .bind(millis(cutoff))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|(id,)| parse_session_id(id)).collect()
    }

    async fn append_event(&self, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let seq = append_in(&mut tx, session.as_str(), message).await?;
        if seq.is_some() {
            tx.commit().await?;
        }
        Ok(seq)
    }

    async fn events_after(&self, session: &SessionId, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let rows: Vec<(i64, String, i64)> = sqlx::query_as(
            "SELECT seq, message, created_at FROM session_events WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )
        .bind(session.as_str())
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(seq, text, created_at)| {
                Ok(StoredEvent {
                    seq,
                    message: Self::json(text, "event message")?,
                    created_at: Self::time(created_at)?,
                })
            })
            .collect()
    }

    async fn delivered_seq(&self, session: &SessionId) -> Result<Option<i64>, StoreError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT delivered_seq FROM sessions WHERE id = ?1")
            .bind(session.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|(seq,)| seq))
    }

    async fn insert_elicitation(
        &self,
        e: &ElicitationRecord,
        max_pending: usize,
    ) -> Result<Option<ElicitationRecord>, StoreError> {
        // The UPDATE takes SQLite's write lock, so insertions take turns and the count is exact.
        let mut tx = self.pool.begin().await?;
        // As on PostgreSQL: an overdue pending row the sweeper has not reached yet is expired first,
        // so it is never handed out again (its link answers 410).
        sqlx::query(
            "UPDATE elicitations SET status = 'expired'
             WHERE principal = ?1 AND session_id = ?2 AND requirement = ?3 AND call_key IS ?4
                 AND status = 'pending' AND expires_at <= ?5",
        )
        .bind(e.principal.as_str())
        .bind(e.session_id.as_str())
        .bind(&e.requirement)
        .bind(&e.call_key)
        .bind(millis(e.created_at))
        .execute(&mut *tx)
        .await?;
        let pending = pending_query(e.ask_key(), e.created_at)
            .fetch_optional(&mut *tx)
            .await?
            .map(ElicitationRecord::read::<Self>)
            .transpose()?;
        if pending.is_some() {
            // Another call inserted it first: the one still pending is the answer.
            tx.commit().await?;
            return Ok(pending);
        }
        let (count,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM elicitations WHERE principal = ?1 AND status = 'pending' AND expires_at > ?2",
        )
        .bind(e.principal.as_str())
        .bind(millis(e.created_at))
        .fetch_one(&mut *tx)
        .await?;
        if count >= super::sql_count(max_pending) {
            tx.commit().await?;
            return Ok(None);
        }
        let inserted = sqlx::query_as(sql!(
            "INSERT INTO elicitations ({ELICITATION_COLUMNS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) RETURNING {ELICITATION_COLUMNS}"
        ))
        .bind(e.id.to_string())
        .bind(e.principal.as_str())
        .bind(e.session_id.as_str())
        .bind(&e.requirement)
        .bind(e.status.as_str())
        .bind(&e.message)
        .bind(&e.url)
        .bind(&e.client_name)
        .bind(millis(e.created_at))
        .bind(millis(e.expires_at))
        .bind(e.completed_at.map(millis))
        .bind(&e.call_key)
        .bind(&e.detail)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        ElicitationRecord::read::<Self>(inserted).map(Some)
    }

    async fn pending_elicitation(
        &self,
        ask: AskKey<'_>,
        now: DateTime<Utc>,
    ) -> Result<Option<ElicitationRecord>, StoreError> {
        self.record(pending_query(ask, now)).await
    }

    async fn elicitation(&self, id: &ElicitationId) -> Result<Option<ElicitationRecord>, StoreError> {
        let query =
            sqlx::query_as(sql!("SELECT {ELICITATION_COLUMNS} FROM elicitations WHERE id = ?1")).bind(id.to_string());
        self.record(query).await
    }

    async fn finish_elicitation(&self, ending: Ending<'_>, status: ElicitationStatus) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        if !finish_in(&mut tx, ending.elicitation, status, ending.notification, ending.at).await? {
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn take_unreported_decline(&self, ask: AskKey<'_>) -> Result<Option<ElicitationRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "UPDATE elicitations SET reported = 1 WHERE id = (
                 SELECT id FROM elicitations
                 WHERE principal = ?1 AND session_id = ?2 AND requirement = ?3 AND call_key IS ?4
                     AND status = 'declined' AND reported = 0
                 ORDER BY completed_at DESC LIMIT 1)
             AND reported = 0 RETURNING {ELICITATION_COLUMNS}"
        ))
        .bind(ask.principal.as_str())
        .bind(ask.session.as_str())
        .bind(ask.requirement)
        .bind(ask.call_key);
        self.record(query).await
    }

    async fn expire_elicitations(&self, now: DateTime<Utc>) -> Result<Vec<ElicitationRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "UPDATE elicitations SET status = 'expired' WHERE status = 'pending' AND expires_at <= ?1
             RETURNING {ELICITATION_COLUMNS}"
        ))
        .bind(millis(now));
        self.records(query).await
    }

    async fn expire_overdue_ask(
        &self,
        ask: AskKey<'_>,
        now: DateTime<Utc>,
    ) -> Result<Vec<ElicitationRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "UPDATE elicitations SET status = 'expired'
             WHERE principal = ?1 AND session_id = ?2 AND requirement = ?3 AND call_key IS ?4
                 AND status = 'pending' AND expires_at <= ?5
             RETURNING {ELICITATION_COLUMNS}"
        ))
        .bind(ask.principal.as_str())
        .bind(ask.session.as_str())
        .bind(ask.requirement)
        .bind(ask.call_key)
        .bind(millis(now));
        self.records(query).await
    }

    async fn insert_flow(&self, flow: &OAuthFlowRecord) -> Result<(), StoreError> {
        sqlx::query(sql!(
            "INSERT INTO oauth_flows ({FLOW_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        ))
        .bind(&flow.state_hash)
        .bind(flow.elicitation_id.to_string())
        .bind(flow.principal.as_str())
        .bind(&flow.provider)
        .bind(flow.scopes.join(" "))
        .bind(&flow.pkce_verifier)
        .bind(&flow.browser_hash)
        .bind(millis(flow.created_at))
        .bind(millis(flow.expires_at))
        .bind(flow.used_at.map(millis))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn flow(&self, state_hash: &str) -> Result<Option<OAuthFlowRecord>, StoreError> {
        let query =
            sqlx::query_as(sql!("SELECT {FLOW_COLUMNS} FROM oauth_flows WHERE state_hash = ?1")).bind(state_hash);
        self.record(query).await
    }

    async fn consume_flow(&self, state_hash: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let result = sqlx::query(
            "UPDATE oauth_flows SET used_at = ?2 WHERE state_hash = ?1 AND used_at IS NULL AND expires_at > ?2",
        )
        .bind(state_hash)
        .bind(millis(now))
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn delete_stale_flows(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let result = sqlx::query("DELETE FROM oauth_flows WHERE expires_at < ?1")
            .bind(millis(cutoff))
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected())
    }

    async fn delete_untaken_answers(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let result = sqlx::query("DELETE FROM form_answers WHERE created_at < ?1")
            .bind(millis(cutoff))
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected())
    }

    async fn broadcast(&self, _payload: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn claim_delivery(&self, session: &SessionId, from: i64, to: i64) -> Result<bool, StoreError> {
        let result = sqlx::query("UPDATE sessions SET delivered_seq = ?3 WHERE id = ?1 AND delivered_seq = ?2")
            .bind(session.as_str())
            .bind(from)
            .bind(to)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() == 1)
    }
}
