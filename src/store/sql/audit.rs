//! [`AuditStore`] for both backends: rows appended many to a statement, listed newest first.

use sqlx::types::Json;

use super::Sql;
use crate::domain::Principal;
use crate::store::audit::{AUDIT_COLUMNS, AuditRow, read_row};
use crate::store::{AuditAction, AuditEntry, AuditQuery, AuditRecord, AuditSearch, AuditStore, StoreError};

/// The columns an entry writes, one parameter each.
const INSERT_COLUMNS: [&str; 7] = [
    "at",
    "principal",
    "action",
    "subject",
    "client_address",
    "client_name",
    "detail",
];

/// Rows one INSERT writes at most: far below either backend's limit on parameters, and few
/// enough statement texts (one per row count) for the statement caches.
const ROWS_PER_INSERT: usize = 32;

/// `INSERT INTO audit (...) VALUES` with `rows` rows of parameters.
fn insert_rows(rows: usize) -> String {
    let width = INSERT_COLUMNS.len();
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let params: Vec<String> = (1..=width).map(|column| format!("${}", row * width + column)).collect();
            format!("({})", params.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO audit ({}) VALUES {}",
        INSERT_COLUMNS.join(", "),
        values.join(", ")
    )
}

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
            // One statement for up to ROWS_PER_INSERT rows: a replica's audit writer is a fair
            // share of the statements gatehouse runs. A batch of several statements is one
            // transaction, so it is written whole or not at all.
            let mut tx = if entries.len() > ROWS_PER_INSERT {
                Some(self.pool.begin().await?)
            } else {
                None
            };
            for rows in entries.chunks(ROWS_PER_INSERT) {
                let sql = insert_rows(rows.len());
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for e in rows {
                    query = query
                        .bind(D::stored(e.at))
                        .bind(e.principal.as_str())
                        .bind(e.action.as_str())
                        .bind(e.subject.as_str())
                        .bind(e.client_address.as_deref())
                        .bind(e.client_name.as_deref())
                        .bind(Json(&e.detail));
                }
                match tx.as_mut() {
                    Some(tx) => query.execute(&mut **tx).await?,
                    None => query.execute(&self.pool).await?,
                };
            }
            if let Some(tx) = tx {
                tx.commit().await?;
            }
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
