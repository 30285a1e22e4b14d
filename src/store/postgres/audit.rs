//! PostgreSQL: the audit trail.

use super::*;
use crate::store::audit::{AUDIT_COLUMNS, AuditRow, read_row};

#[async_trait]
impl AuditStore for PostgresStore {
    async fn append_audit(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for e in entries {
            sqlx::query(
                "INSERT INTO audit (at, principal, action, subject, client_address, client_name, detail)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(e.at)
            .bind(e.principal.as_str())
            .bind(e.action.as_str())
            .bind(&e.subject)
            .bind(&e.client_address)
            .bind(&e.client_name)
            .bind(&e.detail)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        let rows: Vec<AuditRow<Self>> = sqlx::query_as(sql!(
            "SELECT {AUDIT_COLUMNS} FROM audit
             WHERE ($1::text IS NULL OR principal = $1) AND ($2::timestamptz IS NULL OR at >= $2)
             ORDER BY at DESC, id DESC LIMIT $3"
        ))
        .bind(q.principal.as_ref().map(Principal::as_str))
        .bind(q.since)
        .bind(crate::store::sql_count(q.limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(read_row::<Self>).collect()
    }
}
