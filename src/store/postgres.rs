//! The production store: PostgreSQL's dialect of the shared SQL. Every change other replicas must
//! learn of is announced with `pg_notify` inside the transaction that makes it, so the
//! announcement and the change commit together; a principal's creations take turns behind an
//! advisory lock; a completion that saves a connection or form values is one statement (one
//! round trip), and so is an event's append.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, PgQueryResult};
use sqlx::{PgPool, Postgres};

use super::rows::{CONNECTION_COLUMNS, FORM_VALUES_COLUMNS, Native};
use super::sql::{
    CONNECTION_UPSERT, Dialect, FORM_VALUES_UPSERT, INSERT_SESSION, NEXT_EVENTS, OneStatement, SqlStore, Syntax,
    sessions_past_cap,
};
use super::{Backend, NOTIFY_CHANNEL, Notice, StoreError};
use crate::domain::{Principal, SessionId};

/// The store on PostgreSQL.
pub type PostgresStore = SqlStore<Postgres>;

/// How long a request waits for a connection. Short: while the database is down a request
/// fails (503, retry) within this time instead of hanging.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// A pooled connection idle at least this long is pinged before it is handed out; one used more
/// recently is not. sqlx pings before every use by default: a second round trip for each
/// statement. A database restart takes far longer than this, so a connection that lived through
/// one is still tested (and replaced) before a request gets it; sqlx drops a connection that
/// failed mid-use when it is returned.
const PING_AFTER_IDLE: Duration = Duration::from_millis(100);

impl PostgresStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url.parse()?;
        // Over TLS, opening a connection is slow: sqlx 0.9.0 leaves Nagle's algorithm on, so the
        // handshake's back-to-back writes each wait for the server's delayed ACK (about 140 ms per
        // connection on loopback, 20 ms without TLS). So that requests do not wait for one to
        // open, all are opened in the background at start and kept (no idle timeout, no maximum
        // lifetime).
        let pool = PgPoolOptions::new()
            .test_before_acquire(false)
            .before_acquire(|connection, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_AFTER_IDLE {
                        sqlx::Connection::ping(connection).await?;
                    }
                    Ok(true)
                })
            })
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

static ONE_STATEMENT: LazyLock<OneStatement> = LazyLock::new(|| OneStatement {
    // The row lock taken by the UPDATE orders concurrent appends to one session.
    append_event: "WITH numbered AS (UPDATE sessions SET last_event_seq = last_event_seq + 1 WHERE id = $1
             RETURNING id, last_event_seq),
         stored AS (INSERT INTO session_events (session_id, seq, message)
             SELECT id, last_event_seq, $2 FROM numbered RETURNING seq)
         SELECT seq, pg_notify($3, $4) FROM stored"
        .to_owned(),
    // Complete the elicitation if its callback started in time, and only then save the
    // connection, append the notification to its session and announce both changes.
    save_connection: format!(
        "WITH completed AS (UPDATE elicitations SET status = 'completed', completed_at = $10
             WHERE id = $12 AND status IN ('pending', 'expired') AND expires_at > $16 RETURNING session_id),
         saved AS (
             INSERT INTO connections ({CONNECTION_COLUMNS})
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM completed
             {CONNECTION_UPSERT}
             RETURNING principal),
         {}
         SELECT EXISTS (SELECT 1 FROM completed), {},
             (SELECT pg_notify($14, $15) FROM saved) IS NULL",
        append_to_completed(13),
        announce_completed(14),
    ),
    // Under the principal's lock: the new session, and the end of its others past the cap. The
    // sweep cannot see the new row (one snapshot), which it leaves alone anyway.
    create_session: format!(
        "WITH inserted AS ({}),
         ended AS (DELETE FROM sessions WHERE id IN ({}) RETURNING id)
         SELECT id, pg_notify($9, {}) FROM ended",
        *INSERT_SESSION,
        sessions_past_cap("$2", "$1", "$8"),
        Notice::changed_sql("id"),
    ),
    // A stream's wake-up: the log's next events, claimed for it if the delivered mark is still
    // where its cursor is (the UPDATE's row lock orders rival claims, as in `claim_delivery`).
    take_events_after: format!(
        "WITH events AS ({NEXT_EVENTS}),
         claimed AS (UPDATE sessions SET delivered_seq = (SELECT max(seq) FROM events)
             WHERE id = $1 AND delivered_seq = $2 AND EXISTS (SELECT 1 FROM events) RETURNING id)
         SELECT seq, message, created_at, NULL::boolean FROM events
         UNION ALL SELECT NULL, NULL, NULL, EXISTS (SELECT 1 FROM claimed) FROM sessions WHERE id = $1
         ORDER BY seq NULLS LAST"
    ),
    // Save the values, complete the elicitation if given and still pending, append the
    // notification and announce it.
    save_form_values: format!(
        "WITH saved AS (
             INSERT INTO form_values ({FORM_VALUES_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) {FORM_VALUES_UPSERT}),
         completed AS (UPDATE elicitations SET status = 'completed', completed_at = $8
             WHERE id = $7 AND status = 'pending' AND expires_at > $8 RETURNING session_id),
         {}
         SELECT EXISTS (SELECT 1 FROM completed), {}",
        append_to_completed(9),
        announce_completed(10),
    ),
});

impl Native for Postgres {
    type Time = DateTime<Utc>;
    type Json = Value;

    fn time(stored: DateTime<Utc>) -> Result<DateTime<Utc>, StoreError> {
        Ok(stored)
    }

    fn json(stored: Value, _what: &str) -> Result<Value, StoreError> {
        Ok(stored)
    }
}

impl Dialect for Postgres {
    const BACKEND: Backend = Backend::Postgres;
    const SYNTAX: Syntax = Syntax {
        skip_locked: true,
        now: "now()",
        announces: true,
    };

    fn stored(at: DateTime<Utc>) -> DateTime<Utc> {
        at
    }

    async fn lock_principal(conn: &mut PgConnection, what: &str, principal: &Principal) -> Result<(), StoreError> {
        // Principals whose keys collide merely wait for each other.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("{what} {}", principal.as_str()))
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn announce_appended(conn: &mut PgConnection, session: &SessionId) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(NOTIFY_CHANNEL)
            .bind(Notice::Appended(session.clone()).encode())
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn touch_sessions(pool: &PgPool, ids: &[SessionId], at: DateTime<Utc>) -> Result<(), StoreError> {
        let ids: Vec<&str> = ids.iter().map(SessionId::as_str).collect();
        sqlx::query("UPDATE sessions SET last_seen_at = GREATEST(last_seen_at, $2) WHERE id = ANY($1)")
            .bind(&ids)
            .bind(at)
            .execute(pool)
            .await?;
        Ok(())
    }

    fn one_statement() -> Option<&'static OneStatement> {
        Some(&ONE_STATEMENT)
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    async fn broadcast(pool: &PgPool, payload: &str) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(NOTIFY_CHANNEL)
            .bind(payload)
            .execute(pool)
            .await?;
        Ok(())
    }

    async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
        super::migrations::POSTGRES.run(pool).await?;
        Ok(())
    }

    async fn check_ready(pool: &PgPool) -> Result<(), StoreError> {
        let applied: Vec<(i64, bool)> = match sqlx::query_as("SELECT version, success FROM _sqlx_migrations")
            .fetch_all(pool)
            .await
        {
            Ok(rows) => rows,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        super::check_migrations(&super::migrations::POSTGRES, &applied)
    }
}
