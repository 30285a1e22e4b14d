//! The embedded store for one process on a laptop: a file in WAL mode. Other processes must not
//! share the file (the bus of a SQLite deployment is in process).

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use super::{Backend, SessionRecord, Store, StoreError, StoredEvent};
use crate::domain::{LogLevel, SessionId};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
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
}

fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn from_millis(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {ms} out of range")))
}

fn json(text: &str, what: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn session_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<SessionRecord, StoreError> {
    Ok(SessionRecord {
        id: super::parse_session_id(row.try_get("id")?)?,
        principal: super::parse_principal(row.try_get("principal")?)?,
        protocol_version: row.try_get("protocol_version")?,
        client_info: json(row.try_get("client_info")?, "client_info")?,
        client_capabilities: json(row.try_get("client_capabilities")?, "client_capabilities")?,
        log_level: super::parse_log_level(row.try_get("log_level")?)?,
        created_at: from_millis(row.try_get("created_at")?)?,
    })
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
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

    async fn create_session(&self, session: &SessionRecord) -> Result<(), StoreError> {
        let created = millis(session.created_at);
        sqlx::query(
            "INSERT INTO sessions (id, principal, protocol_version, client_info, client_capabilities, log_level, created_at, last_seen_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
        )
        .bind(session.id.as_str())
        .bind(session.principal.as_str())
        .bind(&session.protocol_version)
        .bind(session.client_info.to_string())
        .bind(session.client_capabilities.to_string())
        .bind(session.log_level.map(LogLevel::as_str))
        .bind(created)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT id, principal, protocol_version, client_info, client_capabilities, log_level, created_at
             FROM sessions WHERE id = ?1",
        )
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(session_from_row).transpose()
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

    async fn delete_idle_sessions(&self, cutoff: DateTime<Utc>) -> Result<Vec<SessionId>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as("DELETE FROM sessions WHERE last_seen_at < ?1 RETURNING id")
            .bind(millis(cutoff))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|(id,)| super::parse_session_id(id)).collect()
    }

    async fn append_event(&self, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // The UPDATE takes SQLite's write lock first, so appends to one database are serialized.
        let seq: Option<(i64,)> = sqlx::query_as(
            "UPDATE sessions SET last_event_seq = last_event_seq + 1 WHERE id = ?1 RETURNING last_event_seq",
        )
        .bind(session.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some((seq,)) = seq else {
            return Ok(None);
        };
        sqlx::query("INSERT INTO session_events (session_id, seq, message, created_at) VALUES (?1, ?2, ?3, ?4)")
            .bind(session.as_str())
            .bind(seq)
            .bind(message.to_string())
            .bind(millis(Utc::now()))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(seq))
    }

    async fn events_after(&self, session: &SessionId, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT seq, message FROM session_events WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )
        .bind(session.as_str())
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(seq, text)| {
                Ok(StoredEvent {
                    seq,
                    message: json(&text, "event message")?,
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
