//! The production store. Every change other replicas must learn of is announced with
//! `pg_notify` inside the transaction that makes it, so the announcement and the change commit
//! together.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Row};

use super::{Backend, SessionRecord, Store, StoreError, StoredEvent};
use crate::domain::{LogLevel, SessionId};

/// The channel every replica LISTENs on. Payloads: `e <session> <seq>` (event appended) and
/// `s <session>` (session changed or ended).
pub const NOTIFY_CHANNEL: &str = "gatehouse";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url.parse()?;
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options.application_name("gatehouse"))
            .await?;
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

fn session_from_row(row: &sqlx::postgres::PgRow) -> Result<SessionRecord, StoreError> {
    Ok(SessionRecord {
        id: super::parse_session_id(row.try_get("id")?)?,
        principal: super::parse_principal(row.try_get("principal")?)?,
        protocol_version: row.try_get("protocol_version")?,
        client_info: row.try_get("client_info")?,
        client_capabilities: row.try_get("client_capabilities")?,
        log_level: super::parse_log_level(row.try_get("log_level")?)?,
        created_at: row.try_get("created_at")?,
    })
}

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn check_ready(&self) -> Result<(), StoreError> {
        let applied: Vec<(i64, bool)> = match sqlx::query_as("SELECT version, success FROM _sqlx_migrations")
            .fetch_all(&self.pool)
            .await
        {
            Ok(rows) => rows,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        super::check_migrations(&MIGRATOR, &applied)
    }

    async fn create_session(&self, session: &SessionRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (id, principal, protocol_version, client_info, client_capabilities, log_level, created_at, last_seen_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
        )
        .bind(session.id.as_str())
        .bind(session.principal.as_str())
        .bind(&session.protocol_version)
        .bind(&session.client_info)
        .bind(&session.client_capabilities)
        .bind(session.log_level.map(LogLevel::as_str))
        .bind(session.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT id, principal, protocol_version, client_info, client_capabilities, log_level, created_at
             FROM sessions WHERE id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        let deleted = sqlx::query(
            "WITH gone AS (DELETE FROM sessions WHERE id = $1 RETURNING id)
             SELECT pg_notify($2, 's ' || id) FROM gone",
        )
        .bind(id.as_str())
        .bind(NOTIFY_CHANNEL)
        .fetch_optional(&self.pool)
        .await?;
        Ok(deleted.is_some())
    }

    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, StoreError> {
        let updated = sqlx::query(
            "WITH changed AS (UPDATE sessions SET log_level = $2 WHERE id = $1 RETURNING id)
             SELECT pg_notify($3, 's ' || id) FROM changed",
        )
        .bind(id.as_str())
        .bind(level.as_str())
        .bind(NOTIFY_CHANNEL)
        .fetch_optional(&self.pool)
        .await?;
        Ok(updated.is_some())
    }

    async fn touch_sessions(&self, ids: &[SessionId], at: DateTime<Utc>) -> Result<(), StoreError> {
        let ids: Vec<&str> = ids.iter().map(SessionId::as_str).collect();
        sqlx::query("UPDATE sessions SET last_seen_at = GREATEST(last_seen_at, $2) WHERE id = ANY($1)")
            .bind(&ids)
            .bind(at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn delete_idle_sessions(&self, cutoff: DateTime<Utc>) -> Result<Vec<SessionId>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "WITH gone AS (DELETE FROM sessions WHERE last_seen_at < $1 RETURNING id)
             SELECT id FROM gone, LATERAL (SELECT pg_notify($2, 's ' || id)) AS notified",
        )
        .bind(cutoff)
        .bind(NOTIFY_CHANNEL)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|(id,)| super::parse_session_id(id)).collect()
    }

    async fn append_event(&self, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // The row lock taken by this UPDATE orders concurrent appends to one session.
        let seq: Option<(i64,)> = sqlx::query_as(
            "UPDATE sessions SET last_event_seq = last_event_seq + 1 WHERE id = $1 RETURNING last_event_seq",
        )
        .bind(session.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some((seq,)) = seq else {
            return Ok(None);
        };
        sqlx::query("INSERT INTO session_events (session_id, seq, message) VALUES ($1, $2, $3)")
            .bind(session.as_str())
            .bind(seq)
            .bind(message)
            .execute(&mut *tx)
            .await?;
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(NOTIFY_CHANNEL)
            .bind(format!("e {session} {seq}"))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(seq))
    }

    async fn events_after(&self, session: &SessionId, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let rows: Vec<(i64, Value)> = sqlx::query_as(
            "SELECT seq, message FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(session.as_str())
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, message)| StoredEvent { seq, message })
            .collect())
    }

    async fn delivered_seq(&self, session: &SessionId) -> Result<Option<i64>, StoreError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT delivered_seq FROM sessions WHERE id = $1")
            .bind(session.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|(seq,)| seq))
    }

    async fn claim_delivery(&self, session: &SessionId, from: i64, to: i64) -> Result<bool, StoreError> {
        let result = sqlx::query("UPDATE sessions SET delivered_seq = $3 WHERE id = $1 AND delivered_seq = $2")
            .bind(session.as_str())
            .bind(from)
            .bind(to)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() == 1)
    }
}
