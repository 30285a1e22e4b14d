//! [`AuditStore`] for both backends: rows appended in one transaction, listed newest first.

use sqlx::types::Json;

use super::Sql;
use crate::domain::Principal;
use crate::store::audit::{AUDIT_COLUMNS, AuditRow, read_row};
use crate::store::{AuditAction, AuditEntry, AuditQuery, AuditRecord, AuditSearch, AuditStore, StoreError};

static LIST: Sql = Sql::new(|_| {
    format!(
        "SELECT {AUDIT_COLUMNS} FROM audit
         WHERE ($1 IS NULL OR principal = $1) AND ($2 IS NULL OR at >= $2)
         ORDER BY at DESC, id DESC LIMIT $3"
    )
});

static SEARCH: Sql = Sql::new(|_| {
    format!(
        "SELECT {AUDIT_COLUMNS} FROM audit
         WHERE ($1 IS NULL OR principal = $1) AND ($2 IS NULL OR action = $2)
           AND ($3 IS NULL OR at >= $3) AND ($4 IS NULL OR at < $4)
         ORDER BY at DESC, id DESC LIMIT $5 OFFSET $6"
    )
});

shared! {
    impl AuditStore {
        async fn append_audit(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
            let mut tx = self.pool.begin().await?;
            for e in entries {
                sqlx::query(
                    "INSERT INTO audit (at, principal, action, subject, client_address, client_name, detail)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(D::stored(e.at))
                .bind(e.principal.as_str())
                .bind(e.action.as_str())
                .bind(e.subject.as_str())
                .bind(e.client_address.as_deref())
                .bind(e.client_name.as_deref())
                .bind(Json(&e.detail))
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        }

        async fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
            let rows: Vec<AuditRow<D>> = sqlx::query_as(LIST.of::<D>())
                .bind(q.principal.as_ref().map(Principal::as_str))
                .bind(q.since.map(D::stored))
                .bind(crate::store::sql_count(q.limit))
                .fetch_all(&self.pool)
                .await?;
            rows.into_iter().map(read_row::<D>).collect()
        }

        async fn search_audit(&self, s: &AuditSearch) -> Result<Vec<AuditRecord>, StoreError> {
            let rows: Vec<AuditRow<D>> = sqlx::query_as(SEARCH.of::<D>())
                .bind(s.principal.as_ref().map(Principal::as_str))
                .bind(s.action.map(AuditAction::as_str))
                .bind(s.since.map(D::stored))
                .bind(s.until.map(D::stored))
                .bind(crate::store::sql_count(s.limit))
                .bind(crate::store::sql_count(s.offset))
                .fetch_all(&self.pool)
                .await?;
            rows.into_iter().map(read_row::<D>).collect()
        }
    }
}
