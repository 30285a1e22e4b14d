//! [`AdminStore`] for both backends: the operator's lists across principals.

use super::Sql;
use crate::domain::{Principal, SessionId, SessionPrefix};
use crate::store::rows::{CONNECTION_COLUMNS, ELICITATION_COLUMNS, SESSION_COLUMNS, parse_session_id};
use crate::store::{AdminStore, ConnectionRecord, ElicitationRecord, SessionRecord, StoreError};

static CONNECTIONS: Sql = Sql::new(|_| {
    format!(
        "SELECT {CONNECTION_COLUMNS} FROM connections WHERE ($1 IS NULL OR principal = $1)
         ORDER BY principal, provider LIMIT $2"
    )
});

static ELICITATIONS: Sql = Sql::new(|_| {
    format!(
        "SELECT {ELICITATION_COLUMNS} FROM elicitations WHERE (NOT $1 OR status = 'pending')
         ORDER BY created_at DESC, id DESC LIMIT $2"
    )
});

static SESSIONS: Sql =
    Sql::new(|_| format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at DESC, id LIMIT $1"));

shared! {
    impl AdminStore {
        async fn list_connections(
            &self,
            principal: Option<&Principal>,
            limit: usize,
        ) -> Result<Vec<ConnectionRecord>, StoreError> {
            let query = sqlx::query_as(CONNECTIONS.of::<D>())
                .bind(principal.map(Principal::as_str))
                .bind(crate::store::sql_count(limit));
            self.records(query).await
        }

        async fn list_elicitations(&self, pending_only: bool, limit: usize) -> Result<Vec<ElicitationRecord>, StoreError> {
            let query = sqlx::query_as(ELICITATIONS.of::<D>())
                .bind(pending_only)
                .bind(crate::store::sql_count(limit));
            self.records(query).await
        }

        async fn list_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
            self.records(sqlx::query_as(SESSIONS.of::<D>()).bind(crate::store::sql_count(limit)))
                .await
        }

        async fn sessions_with_prefix(&self, prefix: &SessionPrefix, limit: usize) -> Result<Vec<SessionId>, StoreError> {
            let ids: Vec<(String,)> =
                sqlx::query_as("SELECT id FROM sessions WHERE substr(id, 1, $1) = $2 ORDER BY id LIMIT $3")
                    .bind(i32::try_from(prefix.as_str().len()).unwrap_or(i32::MAX))
                    .bind(prefix.as_str())
                    .bind(crate::store::sql_count(limit))
                    .fetch_all(&self.pool)
                    .await?;
            ids.into_iter().map(|(id,)| parse_session_id(&id)).collect()
        }
    }
}
