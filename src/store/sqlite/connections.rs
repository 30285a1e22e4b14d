//! SQLite: connections, saved with their elicitation's completion in one transaction, and their
//! refresh lease.

use super::*;

#[async_trait]
impl ConnectionStore for SqliteStore {
    async fn save_connection(
        &self,
        c: &ConnectionRecord,
        elicitation: &ElicitationId,
        notification: &Value,
        started: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Completed first: without its elicitation the transaction is dropped and nothing saved.
        let session: Option<(String,)> = sqlx::query_as(
            "UPDATE elicitations SET status = 'completed', completed_at = ?2
             WHERE id = ?1 AND status IN ('pending', 'expired') AND expires_at > ?3 RETURNING session_id",
        )
        .bind(elicitation.to_string())
        .bind(millis(c.updated_at))
        .bind(millis(started))
        .fetch_optional(&mut *tx)
        .await?;
        let Some((session,)) = session else {
            return Ok(false);
        };
        sqlx::query(sql!(
            "INSERT INTO connections ({CONNECTION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (principal, provider) DO UPDATE SET access_token = EXCLUDED.access_token,
                 refresh_token = EXCLUDED.refresh_token, expires_at = EXCLUDED.expires_at, scopes = EXCLUDED.scopes,
                 account_label = EXCLUDED.account_label, status = EXCLUDED.status, refresh_lease = NULL,
                 updated_at = EXCLUDED.updated_at"
        ))
        .bind(c.principal.as_str())
        .bind(&c.provider)
        .bind(&c.access_token)
        .bind(&c.refresh_token)
        .bind(c.expires_at.map(millis))
        .bind(c.scopes.join(" "))
        .bind(&c.account_label)
        .bind(super::super::connection_status_str(c.status))
        .bind(millis(c.created_at))
        .bind(millis(c.updated_at))
        .execute(&mut *tx)
        .await?;
        append_in(&mut tx, &session, notification).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn connection(&self, principal: &Principal, provider: &str) -> Result<Option<ConnectionRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {CONNECTION_COLUMNS} FROM connections WHERE principal = ?1 AND provider = ?2"
        ))
        .bind(principal.as_str())
        .bind(provider);
        self.record(query).await
    }

    async fn connections(&self, principal: &Principal) -> Result<Vec<ConnectionRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {CONNECTION_COLUMNS} FROM connections WHERE principal = ?1 ORDER BY provider"
        ))
        .bind(principal.as_str());
        self.records(query).await
    }

    async fn delete_connection(
        &self,
        principal: &Principal,
        provider: &str,
    ) -> Result<Option<ConnectionRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "DELETE FROM connections WHERE principal = ?1 AND provider = ?2 RETURNING {CONNECTION_COLUMNS}"
        ))
        .bind(principal.as_str())
        .bind(provider);
        self.record(query).await
    }

    async fn mark_connection_broken(
        &self,
        principal: &Principal,
        provider: &str,
        seen_updated_at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let result = sqlx::query(
            "UPDATE connections SET status = 'broken', refresh_lease = NULL
             WHERE principal = ?1 AND provider = ?2 AND updated_at = ?3",
        )
        .bind(principal.as_str())
        .bind(provider)
        .bind(millis(seen_updated_at))
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn acquire_refresh_lease(
        &self,
        connection: &ConnectionRecord,
        lease: RefreshLease,
    ) -> Result<Option<ConnectionRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "UPDATE connections SET refresh_lease = ?3
             WHERE principal = ?1 AND provider = ?2 AND status = 'active' AND (refresh_lease IS NULL OR refresh_lease <= ?4)
             RETURNING {CONNECTION_COLUMNS}"
        ))
        .bind(connection.principal.as_str())
        .bind(&connection.provider)
        .bind(millis(lease.until))
        .bind(millis(lease.now));
        self.record(query).await
    }

    async fn store_refreshed(
        &self,
        principal: &Principal,
        provider: &str,
        t: &RefreshedTokens,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE connections SET access_token = COALESCE(?3, access_token), refresh_token = COALESCE(?4, refresh_token), expires_at = ?5,
                 scopes = COALESCE(?6, scopes), refresh_lease = NULL, updated_at = ?7
             WHERE principal = ?1 AND provider = ?2",
        )
        .bind(principal.as_str())
        .bind(provider)
        .bind(&t.access_token)
        .bind(&t.refresh_token)
        .bind(t.expires_at.map(millis))
        .bind(t.scopes.as_ref().map(|s| s.join(" ")))
        .bind(millis(Utc::now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
