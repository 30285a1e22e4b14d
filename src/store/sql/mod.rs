//! The one body of SQL behind both backends: [`SqlStore`] implements every store trait once,
//! generically over a [`Dialect`], and each backend (`postgres`, `sqlite`) supplies only what
//! really differs between them.
//!
//! The design: a statement is written once, in `$N` placeholders (which sqlx's SQLite driver
//! accepts too), and run with `sqlx::query` over the backend's own pool, so values keep their
//! native types and statements are prepared and cached by sqlx as before. What the dialects write
//! differently inside a statement (row locks skipped, the database's clock, the announcement to
//! other replicas) is a [`Syntax`] fragment; such a statement is a [`Sql`], built once per
//! dialect. Where PostgreSQL numbers, stores and announces in one round trip what SQLite does in
//! a transaction of several statements, the dialect gives those statements ([`OneStatement`]) and
//! the shared code binds them. What differs in more than text (advisory locks and `pg_notify`
//! against SQLite's single writer, arrays, how times and JSON are stored, migrations) is a method
//! of the [`Dialect`] trait, written by each backend in its own module. `sqlx::Any` was not used:
//! it decodes through a common value type and would lose the native time and JSON types.
//!
//! Rust does not carry an impl's where-clauses to its users, so every generic impl here repeats
//! what the dialect's database must encode and decode; `shared!` writes that list once.

/// An impl, generic over every dialect whose database encodes and decodes the types the shared
/// statements bind and read: `impl Trait { .. }` for a store trait, `impl { .. }` for inherent
/// helpers of [`SqlStore`].
macro_rules! shared {
    (@bounded [$($header:tt)*] { $($body:tt)* }) => {
        $($header)*
        where
            for<'c> &'c mut <D as sqlx::Database>::Connection: sqlx::Executor<'c, Database = D>,
            <D as sqlx::Database>::Arguments: sqlx::IntoArguments<D>,
            for<'r> &'r str: sqlx::ColumnIndex<<D as sqlx::Database>::Row>,
            usize: sqlx::ColumnIndex<<D as sqlx::Database>::Row>,
            for<'q, 'v> &'v str: sqlx::Encode<'q, D> + sqlx::Type<D>,
            for<'q> Option<&'q str>: sqlx::Encode<'q, D>,
            for<'q> String: sqlx::Encode<'q, D> + sqlx::Decode<'q, D> + sqlx::Type<D>,
            for<'q> Option<String>: sqlx::Encode<'q, D>,
            for<'q> i64: sqlx::Encode<'q, D> + sqlx::Decode<'q, D> + sqlx::Type<D>,
            for<'q> i32: sqlx::Encode<'q, D> + sqlx::Type<D>,
            for<'q> bool: sqlx::Encode<'q, D> + sqlx::Decode<'q, D> + sqlx::Type<D>,
            for<'q, 'v> &'v [u8]: sqlx::Encode<'q, D> + sqlx::Type<D>,
            for<'q> Option<&'q [u8]>: sqlx::Encode<'q, D>,
            for<'q> Vec<u8>: sqlx::Decode<'q, D> + sqlx::Type<D>,
            for<'q> Option<Vec<u8>>: sqlx::Encode<'q, D>,
            for<'q> <D as $crate::store::rows::Native>::Time:
                sqlx::Encode<'q, D> + sqlx::Decode<'q, D> + sqlx::Type<D> + Send + Sync + Unpin,
            for<'q> Option<<D as $crate::store::rows::Native>::Time>: sqlx::Encode<'q, D>,
            for<'q> <D as $crate::store::rows::Native>::Json:
                sqlx::Decode<'q, D> + sqlx::Type<D> + Send + Unpin,
            for<'q, 'v> sqlx::types::Json<&'v serde_json::Value>: sqlx::Encode<'q, D> + sqlx::Type<D>,
        { $($body)* }
    };
    (impl { $($body:tt)* }) => {
        shared!(@bounded [impl<D: $crate::store::sql::Dialect> $crate::store::sql::SqlStore<D>] { $($body)* });
    };
    ($(impl $trait:path { $($body:tt)* })+) => {$(
        shared!(@bounded [
            #[async_trait::async_trait]
            impl<D: $crate::store::sql::Dialect> $trait for $crate::store::sql::SqlStore<D>
        ] { $($body)* });
    )+};
}

mod admin;
mod approvals;
mod audit;
mod browser_sessions;
mod catalogues;
mod connections;
mod forms;
mod principals;
mod registrations;
mod retention;
mod sealed;
mod sessions;

use std::future::Future;
use std::sync::{LazyLock, OnceLock};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{FromRow, Pool};

use super::rows::{ELICITATION_COLUMNS, Native, SESSION_COLUMNS, Stored, parse_session_id};
use super::{AskKey, Backend, ElicitationStatus, NOTIFY_CHANNEL, StoreError};
use crate::domain::{ElicitationId, Principal, SessionId};

/// What the backends write differently inside statements that are otherwise the same.
#[derive(Debug, Clone, Copy)]
pub struct Syntax {
    /// `FOR UPDATE OF <table> SKIP LOCKED` (PostgreSQL): a racing writer passes over the rows
    /// another holds. SQLite has one writer at a time and nothing to skip.
    pub skip_locked: bool,
    /// The database's clock, as the backend stores a time.
    pub now: &'static str,
    /// Changes are announced to other replicas in the statement that makes them (`pg_notify`).
    pub announces: bool,
}

impl Syntax {
    /// The lock clause ending a subquery over `table` that a racing statement should pass over.
    pub fn skip_locked(self, table: &str) -> String {
        if self.skip_locked {
            format!("FOR UPDATE OF {table} SKIP LOCKED")
        } else {
            String::new()
        }
    }

    /// `statement` (which ends in `RETURNING`) announcing, for each row it returns, the payload
    /// that the SQL expression `notice` writes from that row's columns; the rows are returned as
    /// `statement` returns them.
    pub fn notifying(self, statement: &str, notice: &str) -> String {
        if self.announces {
            format!(
                "WITH changed AS ({statement}) SELECT changed.*, pg_notify('{NOTIFY_CHANNEL}', {notice}) FROM changed"
            )
        } else {
            statement.to_owned()
        }
    }
}

/// A statement written once with its dialect's [`Syntax`], built the first time each dialect
/// runs it and kept (so sqlx finds it in its statement cache by the same text).
pub(super) struct Sql {
    write: fn(Syntax) -> String,
    built: [OnceLock<String>; 2],
}

impl Sql {
    pub const fn new(write: fn(Syntax) -> String) -> Self {
        Self {
            write,
            built: [OnceLock::new(), OnceLock::new()],
        }
    }

    /// The statement as dialect `D` writes it.
    pub fn of<D: Dialect>(&'static self) -> &'static str {
        self.built[D::BACKEND as usize].get_or_init(|| (self.write)(D::SYNTAX))
    }
}

/// A backend's database, with what it does its own way. The methods are what differs in more
/// than a statement's text; each backend's module writes them.
pub trait Dialect: sqlx::Database + Native {
    const BACKEND: Backend;
    const SYNTAX: Syntax;

    /// A time as the backend stores it.
    fn stored(at: DateTime<Utc>) -> Self::Time;

    /// Makes the transaction on `conn` wait for, and hold until it ends, the lock on `what` of
    /// `principal`, so that the principal's creations take turns across replicas and each counts
    /// what the ones before it committed. On SQLite the transaction's first write takes the one
    /// write lock, which is enough.
    fn lock_principal<'a>(
        conn: &'a mut Self::Connection,
        what: &'a str,
        principal: &'a Principal,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a;

    /// Tells every replica, when the transaction on `conn` commits, that the session's log may
    /// have grown (a stored session's, or a 2026-07-28 caller's, whose held retries wait for it).
    fn announce_appended<'a>(
        conn: &'a mut Self::Connection,
        session: &'a SessionId,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a;

    /// [`Store::touch_sessions`](super::Store::touch_sessions).
    fn touch_sessions<'a>(
        pool: &'a Pool<Self>,
        ids: &'a [SessionId],
        at: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a;

    /// The statements that do in one round trip what the shared code otherwise does in a
    /// transaction of several, where the dialect has them.
    fn one_statement() -> Option<&'static OneStatement>;

    /// How many rows a statement changed.
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// [`Store::broadcast`](super::Store::broadcast).
    fn broadcast<'a>(
        pool: &'a Pool<Self>,
        payload: &'a str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a;

    /// [`Store::migrate`](super::Store::migrate).
    fn migrate(pool: &Pool<Self>) -> impl Future<Output = Result<(), StoreError>> + Send + '_;

    /// [`Store::check_ready`](super::Store::check_ready).
    fn check_ready(pool: &Pool<Self>) -> impl Future<Output = Result<(), StoreError>> + Send + '_;
}

/// Statements that number, store and announce in one round trip (PostgreSQL's data-modifying
/// CTEs), with their parameters as the shared code binds them.
pub struct OneStatement {
    /// [`Store::append_event`](super::Store::append_event): the session, the message, the
    /// channel and the notice.
    pub append_event: String,
    /// [`ConnectionStore::save_connection`](super::ConnectionStore::save_connection): the
    /// connection's columns (1 to 11), the elicitation, the notification, the channel, the
    /// connections' notice and when the callback started (12 to 16).
    pub save_connection: String,
    /// [`Store::create_session`](super::Store::create_session), once the principal's lock is
    /// held: the insertion (the session's columns and its creation, 1 to 7) and the end of the
    /// principal's other sessions past the newest `$8`, announced on the channel `$9`; returns
    /// the ended sessions' ids.
    pub create_session: String,
    /// [`Store::take_events_after`](super::Store::take_events_after): the session, the cursor and
    /// the limit; rows of `seq`, `message`, `created_at` and a null, then (when the session
    /// exists) a row of nulls but for whether the claim took.
    pub take_events_after: String,
    /// [`FormStore::save_form_values`](super::FormStore::save_form_values): the values' columns
    /// (1 to 6), the elicitation, now, the notification and the channel (7 to 10).
    pub save_form_values: String,
}

/// The store of either backend: its pool, and the dialect's way with it.
pub struct SqlStore<D: Dialect> {
    pub(super) pool: Pool<D>,
}

/// A saved connection replaces the principal's previous one at the provider, and ends its lease.
pub(super) const CONNECTION_UPSERT: &str = "ON CONFLICT (principal, provider) DO UPDATE SET
     access_token = EXCLUDED.access_token, refresh_token = EXCLUDED.refresh_token, expires_at = EXCLUDED.expires_at,
     scopes = EXCLUDED.scopes, account_label = EXCLUDED.account_label, status = EXCLUDED.status,
     refresh_lease = NULL, updated_at = EXCLUDED.updated_at, issuer = EXCLUDED.issuer";

/// Saved form values replace the earlier ones; the first save's `created_at` is kept.
pub(super) const FORM_VALUES_UPSERT: &str = "ON CONFLICT (principal, form) DO UPDATE SET
     fields = EXCLUDED.fields, secrets = EXCLUDED.secrets, updated_at = EXCLUDED.updated_at";

/// A new session, its columns bound at `$1` to `$7` (the last, its creation, is also when it was
/// last seen).
pub(super) static INSERT_SESSION: LazyLock<String> = LazyLock::new(|| {
    format!("INSERT INTO sessions ({SESSION_COLUMNS}, last_seen_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7)")
});

/// The ids of the principal's (bound at `principal`) sessions but `new` past the newest `offset`,
/// the most recently used first: the ones a new session over the cap ends.
pub(super) fn sessions_past_cap(principal: &str, new: &str, offset: &str) -> String {
    format!(
        "SELECT id FROM sessions WHERE principal = {principal} AND id <> {new}
         ORDER BY last_seen_at DESC, created_at DESC, id DESC {NO_LIMIT} OFFSET {offset}"
    )
}

/// A session's (`$1`) next events after `$2`, in the log's index order, at most `$3`.
pub(super) const NEXT_EVENTS: &str =
    "SELECT seq, message, created_at FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";

/// "No limit", written so that SQLite, which takes no `OFFSET` without a `LIMIT`, takes it too.
const NO_LIMIT: &str = "LIMIT 9223372036854775807";

type Query<'q, D> = sqlx::query::Query<'q, D, <D as sqlx::Database>::Arguments>;
type QueryAs<'q, D, R> = sqlx::query::QueryAs<'q, D, R, <D as sqlx::Database>::Arguments>;

/// Moves the elicitation unexpired at the bound time (`$3`) from the bound status (`$2`).
const FINISH: &str = "UPDATE elicitations SET status = $2, completed_at = $3
     WHERE id = $1 AND status = 'pending' AND expires_at > $3 RETURNING session_id";

/// The rows of an ask ([`AskKey`]), columns prefixed by `p` (a table alias and a dot, or
/// nothing): the principal (`$1`), the requirement (`$3`) and the call key (`$4`), and the
/// session (`$2`) or, for a caller-bound ask (`$2` NULL), a caller-bound row of the OAuth client
/// bound at `client`.
pub(super) fn ask_rows(p: &str, client: &str) -> String {
    format!(
        "{p}principal = $1 AND {p}requirement = $3 AND {p}call_key IS NOT DISTINCT FROM $4
         AND ({p}session_id = $2 OR ($2 IS NULL AND {p}call_arguments IS NOT NULL
             AND {p}oauth_client IS NOT DISTINCT FROM {client}))"
    )
}

static PENDING: Sql = Sql::new(|_| {
    format!(
        "SELECT {ELICITATION_COLUMNS} FROM elicitations
         WHERE {} AND status = 'pending' AND expires_at > $5",
        ask_rows("", "$6")
    )
});

static APPEND: Sql = Sql::new(|syntax| {
    format!(
        "INSERT INTO session_events (session_id, seq, message, created_at) VALUES ($1, $2, $3, {})",
        syntax.now
    )
});

shared! {
    impl {
        /// The record in the row `query` returns, if any.
        pub(super) async fn record<T: Stored>(&self, query: QueryAs<'_, D, T::Row<D>>) -> Result<Option<T>, StoreError>
        where
            T::Row<D>: for<'r> FromRow<'r, D::Row> + Send + Unpin,
        {
            query.fetch_optional(&self.pool).await?.map(T::read::<D>).transpose()
        }

        /// The records in the rows `query` returns.
        pub(super) async fn records<T: Stored>(&self, query: QueryAs<'_, D, T::Row<D>>) -> Result<Vec<T>, StoreError>
        where
            T::Row<D>: for<'r> FromRow<'r, D::Row> + Send + Unpin,
        {
            query.fetch_all(&self.pool).await?.into_iter().map(T::read::<D>).collect()
        }

        /// The elicitation for this ask that is pending and unexpired at `now`.
        pub(super) fn pending_query<'q>(ask: AskKey<'q>, now: DateTime<Utc>) -> QueryAs<'q, D, <super::ElicitationRecord as Stored>::Row<D>> {
            sqlx::query_as(PENDING.of::<D>())
                .bind(ask.principal.as_str())
                .bind(ask.scope.session())
                .bind(ask.requirement)
                .bind(ask.call_key)
                .bind(D::stored(now))
                .bind(ask.scope.client())
        }

        /// `sql` (the insertion of a session, alone or with the sweep of its principal's
        /// sessions over the cap) with the new session's columns bound at `$1` to `$7`; its rows
        /// are the ids of sessions it ended.
        pub(super) fn new_session_query<'q>(sql: &'static str, session: &'q super::SessionRecord) -> QueryAs<'q, D, (String,)> {
            sqlx::query_as(sql)
                .bind(session.id.as_str())
                .bind(session.principal.as_str())
                .bind(session.protocol_version.as_str())
                .bind(Json(&session.client_info))
                .bind(Json(&session.client_capabilities))
                .bind(session.log_level.map(crate::domain::LogLevel::as_str))
                .bind(D::stored(session.created_at))
        }

        /// Appends to a session's log in the transaction on `conn`, announced at commit.
        /// `None`: no such session.
        pub(super) async fn append_in(conn: &mut D::Connection, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError> {
            // The row lock taken by this UPDATE (on SQLite, the write lock) orders concurrent
            // appends to one session.
            let seq: Option<(i64,)> = sqlx::query_as(
                "UPDATE sessions SET last_event_seq = last_event_seq + 1 WHERE id = $1 RETURNING last_event_seq",
            )
            .bind(session.as_str())
            .fetch_optional(&mut *conn)
            .await?;
            let Some((seq,)) = seq else {
                return Ok(None);
            };
            sqlx::query(APPEND.of::<D>())
                .bind(session.as_str())
                .bind(seq)
                .bind(Json(message))
                .execute(&mut *conn)
                .await?;
            D::announce_appended(conn, session).await?;
            Ok(Some(seq))
        }

        /// Moves a pending elicitation unexpired at `now` to `status` and appends `notification` to
        /// its session's log, in the transaction on `conn`. False, and nothing changed, when it was
        /// not pending.
        pub(super) async fn finish_in(
            conn: &mut D::Connection,
            id: &ElicitationId,
            status: ElicitationStatus,
            notification: &Value,
            now: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            let session: Option<(String,)> = sqlx::query_as(FINISH)
                .bind(id.to_string())
                .bind(status.as_str())
                .bind(D::stored(now))
                .fetch_optional(&mut *conn)
                .await?;
            let Some((session,)) = session else {
                return Ok(false);
            };
            let session = parse_session_id(&session)?;
            if Self::append_in(conn, &session, notification).await?.is_none() {
                // No stored session: a 2026-07-28 caller's, whose held retries still wait for the news.
                D::announce_appended(conn, &session).await?;
            }
            Ok(true)
        }
    }
}
