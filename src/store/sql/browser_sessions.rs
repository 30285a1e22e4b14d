//! [`BrowserSessionStore`] for both backends: a principal's creations take turns across replicas
//! ([`Dialect::lock_principal`]).

use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::{NO_LIMIT, Sql};
use crate::store::rows::BROWSER_SESSION_COLUMNS;
use crate::store::{BrowserSessionRecord, BrowserSessionStore, StoreError};

static INSERT: Sql =
    Sql::new(|_| format!("INSERT INTO browser_sessions ({BROWSER_SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"));

static UNEXPIRED: Sql =
    Sql::new(|_| format!("SELECT {BROWSER_SESSION_COLUMNS} FROM browser_sessions WHERE id = $1 AND expires_at > $2"));

/// The principal's sessions beyond the newest ones (the count is bound at `$3`), but the new one.
static DELETE_OLDEST: Sql = Sql::new(|_| {
    format!(
        "DELETE FROM browser_sessions WHERE id IN (
             SELECT id FROM browser_sessions WHERE principal = $1 AND id <> $2
             ORDER BY created_at DESC, id DESC {NO_LIMIT} OFFSET $3)"
    )
});

shared! {
    impl BrowserSessionStore {
        async fn create_browser_session(
            &self,
            session: &BrowserSessionRecord,
            max_per_principal: usize,
        ) -> Result<(), StoreError> {
            let mut tx = self.pool.begin().await?;
            D::lock_principal(&mut *tx, "browser sessions", &session.principal).await?;
            sqlx::query(INSERT.of::<D>())
                .bind(session.id.as_str())
                .bind(session.principal.as_str())
                .bind(Json(&session.claims))
                .bind(D::stored(session.created_at))
                .bind(D::stored(session.expires_at))
                .execute(&mut *tx)
                .await?;
            sqlx::query(DELETE_OLDEST.of::<D>())
                .bind(session.principal.as_str())
                .bind(session.id.as_str())
                .bind(crate::store::sql_count(max_per_principal.saturating_sub(1)))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        }

        async fn browser_session(&self, id: &str, now: DateTime<Utc>) -> Result<Option<BrowserSessionRecord>, StoreError> {
            self.record(sqlx::query_as(UNEXPIRED.of::<D>()).bind(id).bind(D::stored(now))).await
        }

        async fn delete_browser_session(&self, id: &str) -> Result<bool, StoreError> {
            let result = sqlx::query("DELETE FROM browser_sessions WHERE id = $1")
                .bind(id)
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&result) > 0)
        }

        async fn delete_expired_browser_sessions(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
            let result = sqlx::query("DELETE FROM browser_sessions WHERE expires_at <= $1")
                .bind(D::stored(now))
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&result))
        }
    }
}
