//! PostgreSQL: connections, saved with their elicitation's completion in one statement, and
//! their refresh lease.

use super::*;

#[async_trait]
impl ConnectionStore for PostgresStore {
    async fn save_connection(
        &self,
        c: &ConnectionRecord,
        elicitation: &ElicitationId,
        notification: &Value,
        started: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        // One statement (atomic, one round trip): complete the elicitation if its callback started
        // in time, and only then save the connection, append the notification to its session and
        // announce both changes.
        let (completed,): (bool,) = sqlx::query_as(sql!(
            "WITH completed AS (UPDATE elicitations SET status = 'completed', completed_at = $10
                 WHERE id = $11 AND status IN ('pending', 'expired') AND expires_at > $15 RETURNING session_id),
             saved AS (
                 INSERT INTO connections ({CONNECTION_COLUMNS})
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 FROM completed
                 ON CONFLICT (principal, provider) DO UPDATE SET access_token = EXCLUDED.access_token,
                     refresh_token = EXCLUDED.refresh_token, expires_at = EXCLUDED.expires_at, scopes = EXCLUDED.scopes,
                     account_label = EXCLUDED.account_label, status = EXCLUDED.status, refresh_lease = NULL,
                     updated_at = EXCLUDED.updated_at
                 RETURNING principal),
             {}
             SELECT EXISTS (SELECT 1 FROM completed), {},
                 (SELECT pg_notify($13, $14) FROM saved) IS NULL",
            append_to_completed(12),
            announce_completed(13),
        ))
        .bind(c.principal.as_str())
        .bind(&c.provider)
        .bind(&c.access_token)
        .bind(&c.refresh_token)
        .bind(c.expires_at)
        .bind(c.scopes.join(" "))
        .bind(&c.account_label)
        .bind(super::super::connection_status_str(c.status))
        .bind(c.created_at)
        .bind(c.updated_at)
        .bind(elicitation.to_string())
        .bind(notification)
        .bind(NOTIFY_CHANNEL)
        .bind(Notice::ConnectionsChanged(c.principal.clone()).encode())
        .bind(started)
        .fetch_one(&self.pool)
        .await?;
        Ok(completed)
    }

    async fn connection(&self, principal: &Principal, provider: &str) -> Result<Option<ConnectionRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {CONNECTION_COLUMNS} FROM connections WHERE principal = $1 AND provider = $2"
        ))
        .bind(principal.as_str())
        .bind(provider);
        self.record(query).await
    }

    async fn connections(&self, principal: &Principal) -> Result<Vec<ConnectionRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {CONNECTION_COLUMNS} FROM connections WHERE principal = $1 ORDER BY provider"
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
            "WITH gone AS (DELETE FROM connections WHERE principal = $1 AND provider = $2 RETURNING {CONNECTION_COLUMNS})
             SELECT gone.*, pg_notify($3, $4) FROM gone"
        ))
        .bind(principal.as_str())
        .bind(provider)
        .bind(NOTIFY_CHANNEL)
        .bind(Notice::ConnectionsChanged(principal.clone()).encode());
        self.record(query).await
    }

    async fn mark_connection_broken(
        &self,
        principal: &Principal,
        provider: &str,
        seen_updated_at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let changed = sqlx::query(
            "WITH changed AS (UPDATE connections SET status = 'broken', refresh_lease = NULL
                 WHERE principal = $1 AND provider = $2 AND updated_at = $3 RETURNING principal)
             SELECT pg_notify($4, $5) FROM changed",
        )
        .bind(principal.as_str())
        .bind(provider)
        .bind(seen_updated_at)
        .bind(NOTIFY_CHANNEL)
        .bind(Notice::ConnectionsChanged(principal.clone()).encode())
        .fetch_optional(&self.pool)
        .await?;
        Ok(changed.is_some())
    }

    async fn acquire_refresh_lease(
        &self,
        connection: &ConnectionRecord,
        lease: RefreshLease,
    ) -> Result<Option<ConnectionRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "UPDATE connections SET refresh_lease = $3
             WHERE principal = $1 AND provider = $2 AND status = 'active' AND (refresh_lease IS NULL OR refresh_lease <= $4)
             RETURNING {CONNECTION_COLUMNS}"
        ))
        .bind(connection.principal.as_str())
        .bind(&connection.provider)
        .bind(lease.until)
        .bind(lease.now);
        self.record(query).await
    }

    async fn store_refreshed(
        &self,
        principal: &Principal,
        provider: &str,
        t: &RefreshedTokens,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "WITH changed AS (UPDATE connections SET access_token = COALESCE($3, access_token), refresh_token = COALESCE($4, refresh_token),
                 expires_at = $5, scopes = COALESCE($6, scopes), refresh_lease = NULL, updated_at = now()
                 WHERE principal = $1 AND provider = $2 RETURNING principal)
             SELECT pg_notify($7, $8) FROM changed",
        )
        .bind(principal.as_str())
        .bind(provider)
        .bind(&t.access_token)
        .bind(&t.refresh_token)
        .bind(t.expires_at)
        .bind(t.scopes.as_ref().map(|s| s.join(" ")))
        .bind(NOTIFY_CHANNEL)
        .bind(Notice::ConnectionsChanged(principal.clone()).encode())
        .fetch_optional(&self.pool)
        .await?;
        Ok(())
    }
}
