//! The production store. Every change other replicas must learn of is announced with
//! `pg_notify` inside the transaction that makes it, so the announcement and the change commit
//! together.

mod admin;
mod audit;
mod browser_sessions;
mod catalogues;
mod connections;
mod forms;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{FromRow, PgPool, Postgres};

use super::rows::{
    BROWSER_SESSION_COLUMNS, CATALOGUE_COLUMNS, CONNECTION_COLUMNS, ELICITATION_COLUMNS, FLOW_COLUMNS,
    FORM_ANSWER_COLUMNS, FORM_VALUES_COLUMNS, Native, SESSION_COLUMNS, Stored, parse_session_id,
};
use super::{
    AskKey, AuditEntry, AuditQuery, AuditRecord, AuditStore, Backend, BrowserSessionRecord, BrowserSessionStore,
    CatalogueRecord, CatalogueStore, ConnectionRecord, ConnectionStore, ElicitationRecord, ElicitationStatus, Ending,
    FormAnswerRecord, FormStore, FormValuesRecord, NOTIFY_CHANNEL, Notice, OAuthFlowRecord, PoolStats, RefreshLease,
    RefreshedTokens, SessionRecord, Store, StoreError, StoredEvent,
};
use crate::domain::{ElicitationId, LogLevel, Principal, SessionId};

type Tx<'a> = sqlx::Transaction<'a, Postgres>;
type QueryAs<'q, R> = sqlx::query::QueryAs<'q, Postgres, R, PgArguments>;

/// Appends to a session's log inside `tx` and announces it at commit. `None`: no such session.
async fn append_in(tx: &mut Tx<'_>, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError> {
    // The row lock taken by this UPDATE orders concurrent appends to one session.
    let seq: Option<(i64,)> = sqlx::query_as(
        "UPDATE sessions SET last_event_seq = last_event_seq + 1 WHERE id = $1 RETURNING last_event_seq",
    )
    .bind(session.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    let Some((seq,)) = seq else {
        return Ok(None);
    };
    sqlx::query("INSERT INTO session_events (session_id, seq, message) VALUES ($1, $2, $3)")
        .bind(session.as_str())
        .bind(seq)
        .bind(message)
        .execute(&mut **tx)
        .await?;
    announce_appended(tx, session).await?;
    Ok(Some(seq))
}

/// Tells every replica, when `tx` commits, that the session's log may have grown.
async fn announce_appended(tx: &mut Tx<'_>, session: &SessionId) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(NOTIFY_CHANNEL)
        .bind(Notice::Appended(session.clone()).encode())
        .execute(&mut **tx)
        .await?;
    Ok(())
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
        "UPDATE elicitations SET status = $2, completed_at = $3
         WHERE id = $1 AND status = 'pending' AND expires_at > $3 RETURNING session_id",
    )
    .bind(id.to_string())
    .bind(status.as_str())
    .bind(now)
    .fetch_optional(&mut **tx)
    .await?;
    let Some((session,)) = session else {
        return Ok(false);
    };
    let session = parse_session_id(&session)?;
    if append_in(tx, &session, notification).await?.is_none() {
        // No stored session: a 2026-07-28 caller's, whose held retries still wait for the news.
        announce_appended(tx, &session).await?;
    }
    Ok(true)
}

/// CTEs for a statement with a CTE `completed` that returns the `session_id` of the elicitation it
/// completed (or nothing): they append the message bound at `$message` to that session's log, if
/// it has one, and the statement must announce it with [`announce_completed`].
fn append_to_completed(message: u8) -> String {
    format!(
        "numbered AS (UPDATE sessions SET last_event_seq = last_event_seq + 1
             WHERE id = (SELECT session_id FROM completed) RETURNING id, last_event_seq),
         stored AS (INSERT INTO session_events (session_id, seq, message)
             SELECT id, last_event_seq, ${message} FROM numbered RETURNING session_id, seq)"
    )
}

/// Announces the completion to the elicitation's session, stored or not (a 2026-07-28 caller's
/// has no row, but its held retries wait for the news); the channel is bound at `$channel`.
fn announce_completed(channel: u8) -> String {
    format!(
        "(SELECT pg_notify(${channel}, {}) FROM completed) IS NULL",
        Notice::appended_sql("session_id")
    )
}

/// Makes `tx` wait for, and hold until it ends, the lock on `what` of `principal`, so that the
/// principal's session creations (or new elicitations) take turns across replicas and each
/// counts what the ones before it committed. Principals whose keys collide merely wait for each
/// other.
async fn lock_principal(tx: &mut Tx<'_>, what: &str, principal: &Principal) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("{what} {}", principal.as_str()))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The elicitation for this ask that is pending and unexpired at `now`.
fn pending_query<'q>(
    ask: AskKey<'q>,
    now: DateTime<Utc>,
) -> QueryAs<'q, <ElicitationRecord as Stored>::Row<PostgresStore>> {
    sqlx::query_as(sql!(
        "SELECT {ELICITATION_COLUMNS} FROM elicitations
         WHERE principal = $1 AND session_id = $2 AND requirement = $3 AND call_key IS NOT DISTINCT FROM $4
             AND status = 'pending' AND expires_at > $5"
    ))
    .bind(ask.principal.as_str())
    .bind(ask.session.as_str())
    .bind(ask.requirement)
    .bind(ask.call_key)
    .bind(now)
}

sealed_store!(
    PostgresStore,
    super::sealed::Syntax {
        placeholder: '$',
        same_as: "IS NOT DISTINCT FROM",
    }
);

retention_store!(PostgresStore, '$', std::convert::identity);

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// How long a request waits for a connection. Short: while the database is down a request
/// fails (503, retry) within this time instead of hanging.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url.parse()?;
        // Over TLS, opening a connection is slow: sqlx 0.9.0 leaves Nagle's algorithm on, so the
        // handshake's back-to-back writes each wait for the server's delayed ACK (about 140 ms per
        // connection on loopback, 20 ms without TLS). So that requests do not wait for one to
        // open, all are opened in the background at start and kept (no idle timeout, no maximum
        // lifetime).
        let pool = PgPoolOptions::new()
            .min_connections(max_connections)
            .idle_timeout(None)
            .max_lifetime(None)
            .max_connections(max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options.application_name("gatehouse"));
        // Like a pool that connects at once: an unreachable database fails the start.
        drop(pool.acquire().await?);
        Ok(Self { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The record in the row `query` returns, if any.
    async fn record<T: Stored>(&self, query: QueryAs<'_, T::Row<Self>>) -> Result<Option<T>, StoreError>
    where
        T::Row<Self>: for<'r> FromRow<'r, PgRow> + Send + Unpin,
    {
        query.fetch_optional(&self.pool).await?.map(T::read::<Self>).transpose()
    }

    /// The records in the rows `query` returns.
    async fn records<T: Stored>(&self, query: QueryAs<'_, T::Row<Self>>) -> Result<Vec<T>, StoreError>
    where
        T::Row<Self>: for<'r> FromRow<'r, PgRow> + Send + Unpin,
    {
        query
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(T::read::<Self>)
            .collect()
    }
}

impl Native for PostgresStore {
    type Time = DateTime<Utc>;
    type Json = Value;

    fn time(stored: DateTime<Utc>) -> Result<DateTime<Utc>, StoreError> {
        Ok(stored)
    }

    fn json(stored: Value, _what: &str) -> Result<Value, StoreError> {
        Ok(stored)
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn pool_stats(&self) -> PoolStats {
        super::pool_stats(&self.pool)
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

    async fn create_session(
        &self,
        session: &SessionRecord,
        max_per_principal: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let mut tx = self.pool.begin().await?;
        lock_principal(&mut tx, "sessions", &session.principal).await?;
        sqlx::query(sql!(
            "INSERT INTO sessions ({SESSION_COLUMNS}, last_seen_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)"
        ))
        .bind(session.id.as_str())
        .bind(session.principal.as_str())
        .bind(&session.protocol_version)
        .bind(&session.client_info)
        .bind(&session.client_capabilities)
        .bind(session.log_level.map(LogLevel::as_str))
        .bind(session.created_at)
        .execute(&mut *tx)
        .await?;
        let ended: Vec<(String,)> = sqlx::query_as(sql!(
            "WITH gone AS (DELETE FROM sessions WHERE id IN (
                 SELECT id FROM sessions WHERE principal = $1 AND id <> $2
                 ORDER BY last_seen_at DESC, created_at DESC, id DESC OFFSET $3) RETURNING id)
             SELECT id FROM gone, LATERAL (SELECT pg_notify($4, {})) AS notified",
            Notice::changed_sql("id"),
        ))
        .bind(session.principal.as_str())
        .bind(session.id.as_str())
        .bind(super::sql_count(max_per_principal.saturating_sub(1)))
        .bind(NOTIFY_CHANNEL)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        ended.iter().map(|(id,)| parse_session_id(id)).collect()
    }

    async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
        let query = sqlx::query_as(sql!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1")).bind(id.as_str());
        self.record(query).await
    }

    async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        let deleted = sqlx::query(
            "WITH gone AS (DELETE FROM sessions WHERE id = $1 RETURNING id) SELECT pg_notify($2, $3) FROM gone",
        )
        .bind(id.as_str())
        .bind(NOTIFY_CHANNEL)
        .bind(Notice::Changed(id.clone()).encode())
        .fetch_optional(&self.pool)
        .await?;
        Ok(deleted.is_some())
    }

    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, StoreError> {
        let updated = sqlx::query(
            "WITH changed AS (UPDATE sessions SET log_level = $2 WHERE id = $1 RETURNING id)
             SELECT pg_notify($3, $4) FROM changed",
        )
        .bind(id.as_str())
        .bind(level.as_str())
        .bind(NOTIFY_CHANNEL)
        .bind(Notice::Changed(id.clone()).encode())
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

    async fn count_sessions(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM sessions")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn delete_idle_sessions(&self, cutoff: DateTime<Utc>) -> Result<Vec<SessionId>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as(sql!(
            "WITH gone AS (DELETE FROM sessions WHERE last_seen_at < $1 RETURNING id)
             SELECT id FROM gone, LATERAL (SELECT pg_notify($2, {})) AS notified",
            Notice::changed_sql("id"),
        ))
        .bind(cutoff)
        .bind(NOTIFY_CHANNEL)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|(id,)| parse_session_id(id)).collect()
    }

    async fn append_event(&self, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError> {
        // One statement, so one round trip: number, store and announce the event atomically. The
        // row lock taken by the UPDATE orders concurrent appends to one session.
        let seq: Option<(i64,)> = sqlx::query_as(
            "WITH numbered AS (UPDATE sessions SET last_event_seq = last_event_seq + 1 WHERE id = $1
                 RETURNING id, last_event_seq),
             stored AS (INSERT INTO session_events (session_id, seq, message)
                 SELECT id, last_event_seq, $2 FROM numbered RETURNING seq)
             SELECT seq, pg_notify($3, $4) FROM stored",
        )
        .bind(session.as_str())
        .bind(message)
        .bind(NOTIFY_CHANNEL)
        .bind(Notice::Appended(session.clone()).encode())
        .fetch_optional(&self.pool)
        .await?;
        Ok(seq.map(|(seq,)| seq))
    }

    async fn events_after(&self, session: &SessionId, after: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let rows: Vec<(i64, Value, DateTime<Utc>)> = sqlx::query_as(
            "SELECT seq, message, created_at FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(session.as_str())
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, message, created_at)| StoredEvent {
                seq,
                message,
                created_at,
            })
            .collect())
    }

    async fn delivered_seq(&self, session: &SessionId) -> Result<Option<i64>, StoreError> {
        let row: Option<(i64,)> = sqlx::query_as("SELECT delivered_seq FROM sessions WHERE id = $1")
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
        let mut tx = self.pool.begin().await?;
        lock_principal(&mut tx, "elicitations", &e.principal).await?;
        // A pending row past its expiry that the sweeper has not reached yet would hold the unique
        // index and be handed out again (its link answers 410), so it is expired first: the same
        // update the sweeper makes, taken early.
        sqlx::query(
            "UPDATE elicitations SET status = 'expired'
             WHERE principal = $1 AND session_id = $2 AND requirement = $3 AND call_key IS NOT DISTINCT FROM $4
                 AND status = 'pending' AND expires_at <= $5",
        )
        .bind(e.principal.as_str())
        .bind(e.session_id.as_str())
        .bind(&e.requirement)
        .bind(&e.call_key)
        .bind(e.created_at)
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
            "SELECT count(*) FROM elicitations WHERE principal = $1 AND status = 'pending' AND expires_at > $2",
        )
        .bind(e.principal.as_str())
        .bind(e.created_at)
        .fetch_one(&mut *tx)
        .await?;
        if count >= super::sql_count(max_pending) {
            tx.commit().await?;
            return Ok(None);
        }
        let inserted = sqlx::query_as(sql!(
            "INSERT INTO elicitations ({ELICITATION_COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING {ELICITATION_COLUMNS}"
        ))
        .bind(e.id.to_string())
        .bind(e.principal.as_str())
        .bind(e.session_id.as_str())
        .bind(&e.requirement)
        .bind(e.status.as_str())
        .bind(&e.message)
        .bind(&e.url)
        .bind(&e.client_name)
        .bind(e.created_at)
        .bind(e.expires_at)
        .bind(e.completed_at)
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
            sqlx::query_as(sql!("SELECT {ELICITATION_COLUMNS} FROM elicitations WHERE id = $1")).bind(id.to_string());
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
            "UPDATE elicitations SET reported = TRUE WHERE id = (
                 SELECT id FROM elicitations
                 WHERE principal = $1 AND session_id = $2 AND requirement = $3 AND call_key IS NOT DISTINCT FROM $4
                     AND status = 'declined' AND NOT reported
                 ORDER BY completed_at DESC LIMIT 1 FOR UPDATE SKIP LOCKED)
             AND NOT reported RETURNING {ELICITATION_COLUMNS}"
        ))
        .bind(ask.principal.as_str())
        .bind(ask.session.as_str())
        .bind(ask.requirement)
        .bind(ask.call_key);
        self.record(query).await
    }

    async fn expire_elicitations(&self, now: DateTime<Utc>) -> Result<Vec<ElicitationRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "UPDATE elicitations SET status = 'expired' WHERE status = 'pending' AND expires_at <= $1
             RETURNING {ELICITATION_COLUMNS}"
        ))
        .bind(now);
        self.records(query).await
    }

    async fn expire_overdue_ask(
        &self,
        ask: AskKey<'_>,
        now: DateTime<Utc>,
    ) -> Result<Vec<ElicitationRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "UPDATE elicitations SET status = 'expired'
             WHERE principal = $1 AND session_id = $2 AND requirement = $3 AND call_key IS NOT DISTINCT FROM $4
                 AND status = 'pending' AND expires_at <= $5
             RETURNING {ELICITATION_COLUMNS}"
        ))
        .bind(ask.principal.as_str())
        .bind(ask.session.as_str())
        .bind(ask.requirement)
        .bind(ask.call_key)
        .bind(now);
        self.records(query).await
    }

    async fn insert_flow(&self, flow: &OAuthFlowRecord) -> Result<(), StoreError> {
        sqlx::query(sql!(
            "INSERT INTO oauth_flows ({FLOW_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(&flow.state_hash)
        .bind(flow.elicitation_id.to_string())
        .bind(flow.principal.as_str())
        .bind(&flow.provider)
        .bind(flow.scopes.join(" "))
        .bind(&flow.pkce_verifier)
        .bind(&flow.browser_hash)
        .bind(flow.created_at)
        .bind(flow.expires_at)
        .bind(flow.used_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn flow(&self, state_hash: &str) -> Result<Option<OAuthFlowRecord>, StoreError> {
        let query =
            sqlx::query_as(sql!("SELECT {FLOW_COLUMNS} FROM oauth_flows WHERE state_hash = $1")).bind(state_hash);
        self.record(query).await
    }

    async fn consume_flow(&self, state_hash: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let result = sqlx::query(
            "UPDATE oauth_flows SET used_at = $2 WHERE state_hash = $1 AND used_at IS NULL AND expires_at > $2",
        )
        .bind(state_hash)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn delete_stale_flows(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let result = sqlx::query("DELETE FROM oauth_flows WHERE expires_at < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected())
    }

    async fn delete_untaken_answers(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let result = sqlx::query("DELETE FROM form_answers WHERE created_at < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected())
    }

    async fn broadcast(&self, payload: &str) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(NOTIFY_CHANNEL)
            .bind(payload)
            .execute(&self.pool)
            .await?;
        Ok(())
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
