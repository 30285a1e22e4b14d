//! The embedded store for one process on a laptop: SQLite's dialect of the shared SQL, on a file
//! in WAL mode. Other processes must not share the file (the bus of a SQLite deployment is in
//! process, so nothing is announced); a transaction's first write takes the one write lock, so
//! writers take turns without further locks; times are stored as Unix milliseconds and JSON as
//! text.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult, SqliteSynchronous,
};
use sqlx::{Sqlite, SqlitePool};

use super::rows::Native;
use super::sql::{Dialect, OneStatement, SqlStore, Syntax};
use super::{Backend, StoreError};
use crate::domain::{Principal, SessionId};
use crate::private_file::create_private_file;

/// The store on SQLite.
pub type SqliteStore = SqlStore<Sqlite>;

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
        // A file's connection cannot go stale as a server's can: no ping (a round trip to the
        // connection's worker thread) before each use.
        let pool = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await?;
        Ok(Self { pool })
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

impl Native for Sqlite {
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

impl Dialect for Sqlite {
    const BACKEND: Backend = Backend::Sqlite;
    const SYNTAX: Syntax = Syntax {
        skip_locked: false,
        // Unix milliseconds, as `stored` writes a time.
        now: "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)",
        announces: false,
    };

    fn stored(at: DateTime<Utc>) -> i64 {
        at.timestamp_millis()
    }

    async fn lock_principal(
        _conn: &mut SqliteConnection,
        _what: &str,
        _principal: &Principal,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    async fn announce_appended(_conn: &mut SqliteConnection, _session: &SessionId) -> Result<(), StoreError> {
        Ok(())
    }

    async fn touch_sessions(pool: &SqlitePool, ids: &[SessionId], at: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tx = pool.begin().await?;
        for id in ids {
            sqlx::query("UPDATE sessions SET last_seen_at = MAX(last_seen_at, $2) WHERE id = $1")
                .bind(id.as_str())
                .bind(Self::stored(at))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    fn one_statement() -> Option<&'static OneStatement> {
        None
    }

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    async fn broadcast(_pool: &SqlitePool, _payload: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
        super::migrations::SQLITE.run(pool).await?;
        Ok(())
    }

    async fn check_ready(pool: &SqlitePool) -> Result<(), StoreError> {
        let table: Option<(String,)> =
            sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'")
                .fetch_optional(pool)
                .await?;
        let applied: Vec<(i64, bool)> = if table.is_some() {
            sqlx::query_as("SELECT version, success FROM _sqlx_migrations")
                .fetch_all(pool)
                .await?
        } else {
            Vec::new()
        };
        super::check_migrations(&super::migrations::SQLITE, &applied)
    }
}
