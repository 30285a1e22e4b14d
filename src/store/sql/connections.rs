//! [`ConnectionStore`] for both backends: connections looked up, deleted, broken, and refreshed
//! under a lease, and saved with their elicitation's completion: in one statement where the
//! dialect has it, else in one transaction.

use chrono::{DateTime, Utc};
use serde_json::Value;

use sqlx::Row;
use sqlx::types::Json;

use super::{CONNECTION_UPSERT, Query, Sql};
use crate::domain::{ElicitationId, Principal};
use crate::store::rows::{CONNECTION_COLUMNS, parse_session_id};
use crate::store::{
    ConnectionRecord, ConnectionStore, NOTIFY_CHANNEL, Notice, RefreshLease, RefreshedTokens, StoreError,
};

static INSERT_CONNECTION: Sql = Sql::new(|_| {
    format!(
        "INSERT INTO connections ({CONNECTION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) {CONNECTION_UPSERT}"
    )
});

static CONNECTION: Sql =
    Sql::new(|_| format!("SELECT {CONNECTION_COLUMNS} FROM connections WHERE principal = $1 AND provider = $2"));

static CONNECTIONS: Sql =
    Sql::new(|_| format!("SELECT {CONNECTION_COLUMNS} FROM connections WHERE principal = $1 ORDER BY provider"));

static DELETE_CONNECTION: Sql = Sql::new(|syntax| {
    syntax.notifying(
        &format!("DELETE FROM connections WHERE principal = $1 AND provider = $2 RETURNING {CONNECTION_COLUMNS}"),
        &Notice::connections_changed_sql("principal"),
    )
});

static MARK_BROKEN: Sql = Sql::new(|syntax| {
    syntax.notifying(
        "UPDATE connections SET status = 'broken', refresh_lease = NULL
         WHERE principal = $1 AND provider = $2 AND updated_at = $3 RETURNING principal",
        &Notice::connections_changed_sql("principal"),
    )
});

static ACQUIRE_REFRESH_LEASE: Sql = Sql::new(|_| {
    format!(
        "UPDATE connections SET refresh_lease = $3
         WHERE principal = $1 AND provider = $2 AND status = 'active' AND (refresh_lease IS NULL OR refresh_lease <= $4)
         RETURNING {CONNECTION_COLUMNS}"
    )
});

static STORE_REFRESHED: Sql = Sql::new(|syntax| {
    syntax.notifying(
        &format!(
            "UPDATE connections SET access_token = COALESCE($3, access_token),
                 refresh_token = COALESCE($4, refresh_token), expires_at = $5, scopes = COALESCE($6, scopes),
                 refresh_lease = NULL, updated_at = {}
             WHERE principal = $1 AND provider = $2 RETURNING principal",
            syntax.now
        ),
        &Notice::connections_changed_sql("principal"),
    )
});

shared! {
    impl ConnectionStore {
        async fn save_connection(
            &self,
            c: &ConnectionRecord,
            elicitation: &ElicitationId,
            notification: &Value,
            started: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            if let Some(one) = D::one_statement() {
                let row = Self::bind_connection(sqlx::query(one.save_connection.as_str()), c)
                    .bind(elicitation.to_string())
                    .bind(Json(notification))
                    .bind(NOTIFY_CHANNEL)
                    .bind(Notice::ConnectionsChanged(c.principal.clone()).encode())
                    .bind(D::stored(started))
                    .fetch_one(&self.pool)
                    .await?;
                return Ok(row.try_get(0)?);
            }
            let mut tx = self.pool.begin().await?;
            // Completed first: without its elicitation the transaction is dropped and nothing saved.
            let session: Option<(String,)> = sqlx::query_as(
                "UPDATE elicitations SET status = 'completed', completed_at = $2
                 WHERE id = $1 AND status IN ('pending', 'expired') AND expires_at > $3 RETURNING session_id",
            )
            .bind(elicitation.to_string())
            .bind(D::stored(c.updated_at))
            .bind(D::stored(started))
            .fetch_optional(&mut *tx)
            .await?;
            let Some((session,)) = session else {
                return Ok(false);
            };
            Self::bind_connection(sqlx::query(INSERT_CONNECTION.of::<D>()), c)
                .execute(&mut *tx)
                .await?;
            Self::append_in(&mut *tx, &parse_session_id(&session)?, notification).await?;
            tx.commit().await?;
            Ok(true)
        }

        async fn connection(&self, principal: &Principal, provider: &str) -> Result<Option<ConnectionRecord>, StoreError> {
            self.record(sqlx::query_as(CONNECTION.of::<D>()).bind(principal.as_str()).bind(provider))
                .await
        }

        async fn connections(&self, principal: &Principal) -> Result<Vec<ConnectionRecord>, StoreError> {
            self.records(sqlx::query_as(CONNECTIONS.of::<D>()).bind(principal.as_str()))
                .await
        }

        async fn delete_connection(
            &self,
            principal: &Principal,
            provider: &str,
        ) -> Result<Option<ConnectionRecord>, StoreError> {
            self.record(sqlx::query_as(DELETE_CONNECTION.of::<D>()).bind(principal.as_str()).bind(provider))
                .await
        }

        async fn mark_connection_broken(
            &self,
            principal: &Principal,
            provider: &str,
            seen_updated_at: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            let changed: Option<(String,)> = sqlx::query_as(MARK_BROKEN.of::<D>())
                .bind(principal.as_str())
                .bind(provider)
                .bind(D::stored(seen_updated_at))
                .fetch_optional(&self.pool)
                .await?;
            Ok(changed.is_some())
        }

        async fn acquire_refresh_lease(
            &self,
            connection: &ConnectionRecord,
            lease: RefreshLease,
        ) -> Result<Option<ConnectionRecord>, StoreError> {
            let query = sqlx::query_as(ACQUIRE_REFRESH_LEASE.of::<D>())
                .bind(connection.principal.as_str())
                .bind(connection.provider.as_str())
                .bind(D::stored(lease.until))
                .bind(D::stored(lease.now));
            self.record(query).await
        }

        async fn store_refreshed(
            &self,
            principal: &Principal,
            provider: &str,
            tokens: &RefreshedTokens,
        ) -> Result<(), StoreError> {
            sqlx::query(STORE_REFRESHED.of::<D>())
                .bind(principal.as_str())
                .bind(provider)
                .bind(tokens.access_token.as_deref())
                .bind(tokens.refresh_token.as_deref())
                .bind(tokens.expires_at.map(D::stored))
                .bind(tokens.scopes.as_ref().map(|s| s.join(" ")))
                .execute(&self.pool)
                .await?;
            Ok(())
        }
    }
}

shared! {
    impl {
        /// Binds the connection's columns, in [`CONNECTION_COLUMNS`] order, from `$1` on.
        fn bind_connection<'q>(query: Query<'q, D>, c: &'q ConnectionRecord) -> Query<'q, D> {
            query
                .bind(c.principal.as_str())
                .bind(c.provider.as_str())
                .bind(c.access_token.as_slice())
                .bind(c.refresh_token.as_deref())
                .bind(c.expires_at.map(D::stored))
                .bind(c.scopes.join(" "))
                .bind(c.account_label.as_deref())
                .bind(c.status.as_str())
                .bind(D::stored(c.created_at))
                .bind(D::stored(c.updated_at))
                .bind(c.issuer.as_deref())
        }
    }
}
