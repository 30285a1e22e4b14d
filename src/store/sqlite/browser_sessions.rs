//! SQLite: the pages' browser sessions.

use super::*;

#[async_trait]
impl BrowserSessionStore for SqliteStore {
    async fn create_browser_session(
        &self,
        session: &BrowserSessionRecord,
        max_per_principal: usize,
    ) -> Result<(), StoreError> {
        // The INSERT takes SQLite's write lock, so creations take turns and each counts the others.
        let mut tx = self.pool.begin().await?;
        sqlx::query(sql!(
            "INSERT INTO browser_sessions ({BROWSER_SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)"
        ))
        .bind(&session.id)
        .bind(session.principal.as_str())
        .bind(session.claims.to_string())
        .bind(millis(session.created_at))
        .bind(millis(session.expires_at))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM browser_sessions WHERE id IN (
                 SELECT id FROM browser_sessions WHERE principal = ?1 AND id <> ?2
                 ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?3)",
        )
        .bind(session.principal.as_str())
        .bind(&session.id)
        .bind(crate::store::sql_count(max_per_principal.saturating_sub(1)))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn browser_session(&self, id: &str, now: DateTime<Utc>) -> Result<Option<BrowserSessionRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {BROWSER_SESSION_COLUMNS} FROM browser_sessions WHERE id = ?1 AND expires_at > ?2"
        ))
        .bind(id)
        .bind(millis(now));
        self.record(query).await
    }

    async fn delete_browser_session(&self, id: &str) -> Result<bool, StoreError> {
        let result = sqlx::query("DELETE FROM browser_sessions WHERE id = ?1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() > 0)
    }

    async fn delete_expired_browser_sessions(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        let result = sqlx::query("DELETE FROM browser_sessions WHERE expires_at <= ?1")
            .bind(millis(now))
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected())
    }
}
