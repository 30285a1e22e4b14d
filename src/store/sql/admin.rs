//! [`AdminStore`] for both backends: the operator's lists across principals, a window at a time.

use super::Sql;
use crate::domain::{Principal, SessionId, SessionPrefix};
use crate::store::admin::{ConnectionOrder, Window};
use crate::store::rows::{CONNECTION_COLUMNS, ELICITATION_COLUMNS, SESSION_COLUMNS, parse_session_id};
use crate::store::{AdminStore, ConnectionRecord, ElicitationRecord, SessionRecord, StoreError};

/// One statement per [`ConnectionOrder`], in its order; ties broken so every page is stable.
static CONNECTIONS: [Sql; 3] = [
    Sql::new(|_| connections("principal, provider")),
    Sql::new(|_| connections("provider, principal")),
    Sql::new(|_| connections("updated_at DESC, principal, provider")),
];

fn connections(order: &str) -> String {
    format!(
        "SELECT {CONNECTION_COLUMNS} FROM connections WHERE ($1 IS NULL OR principal = $1)
         ORDER BY {order} LIMIT $2 OFFSET $3"
    )
}

static ELICITATIONS: Sql = Sql::new(|_| {
    format!(
        "SELECT {ELICITATION_COLUMNS} FROM elicitations WHERE (NOT $1 OR status = 'pending')
         ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3"
    )
});

static SESSIONS: Sql = Sql::new(|_| {
    format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE ($1 IS NULL OR principal = $1)
         ORDER BY created_at DESC, id LIMIT $2 OFFSET $3"
    )
});

fn order_index(order: ConnectionOrder) -> usize {
    match order {
        ConnectionOrder::Principal => 0,
        ConnectionOrder::Provider => 1,
        ConnectionOrder::Updated => 2,
    }
}

shared! {
    impl AdminStore {
        async fn list_connections(
            &self,
            principal: Option<&Principal>,
            order: ConnectionOrder,
            window: Window,
        ) -> Result<Vec<ConnectionRecord>, StoreError> {
            let query = sqlx::query_as(CONNECTIONS[order_index(order)].of::<D>())
                .bind(principal.map(Principal::as_str))
                .bind(crate::store::sql_count(window.limit))
                .bind(crate::store::sql_count(window.offset));
            self.records(query).await
        }

        async fn list_elicitations(&self, pending_only: bool, window: Window) -> Result<Vec<ElicitationRecord>, StoreError> {
            let query = sqlx::query_as(ELICITATIONS.of::<D>())
                .bind(pending_only)
                .bind(crate::store::sql_count(window.limit))
                .bind(crate::store::sql_count(window.offset));
            self.records(query).await
        }

        async fn list_sessions(&self, principal: Option<&Principal>, window: Window) -> Result<Vec<SessionRecord>, StoreError> {
            let query = sqlx::query_as(SESSIONS.of::<D>())
                .bind(principal.map(Principal::as_str))
                .bind(crate::store::sql_count(window.limit))
                .bind(crate::store::sql_count(window.offset));
            self.records(query).await
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
