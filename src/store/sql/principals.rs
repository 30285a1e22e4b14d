//! [`PrincipalStore`] for both backends: the principals of every table, and their rewrite. The
//! rewrite's first statement records its form, so a replica starting at the same time waits on
//! that row (PostgreSQL's unique index; SQLite's one writer) and then finds the form applied.

use std::sync::LazyLock;

use crate::domain::PrincipalForm;
use crate::store::StoreError;
use crate::store::principals::{Normalised, PRINCIPAL_COLUMNS, PrincipalStore, plan};

static STORED: LazyLock<String> = LazyLock::new(|| {
    PRINCIPAL_COLUMNS
        .iter()
        .map(|(table, column)| format!("SELECT {column} FROM {table} WHERE {column} IS NOT NULL"))
        .collect::<Vec<_>>()
        .join(" UNION ")
});

static RENAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    PRINCIPAL_COLUMNS
        .iter()
        .map(|(table, column)| format!("UPDATE {table} SET {column} = $2 WHERE {column} = $1"))
        .collect()
});

shared! {
    impl PrincipalStore {
        async fn stored_principals(&self) -> Result<Vec<String>, StoreError> {
            let rows: Vec<(String,)> = sqlx::query_as(STORED.as_str()).fetch_all(&self.pool).await?;
            Ok(rows.into_iter().map(|(p,)| p).collect())
        }

        async fn normalise_principals(&self, form: PrincipalForm) -> Result<Normalised, StoreError> {
            let Some(recorded) = form.stored_as() else {
                return Ok(Normalised::default());
            };
            let mut tx = self.pool.begin().await?;
            let claimed = sqlx::query("INSERT INTO principal_forms (form) VALUES ($1) ON CONFLICT (form) DO NOTHING")
                .bind(recorded.as_str())
                .execute(&mut *tx)
                .await?;
            if D::rows_affected(&claimed) == 0 {
                tx.commit().await?;
                return Ok(Normalised::default());
            }
            let stored: Vec<(String,)> = sqlx::query_as(STORED.as_str()).fetch_all(&mut *tx).await?;
            let (renames, collisions) = plan(stored.into_iter().map(|(p,)| p), form);
            for (old, new) in &renames {
                for rename in RENAMES.iter() {
                    sqlx::query(rename.as_str())
                        .bind(old.as_str())
                        .bind(new.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
            }
            if !collisions.is_empty() {
                sqlx::query("DELETE FROM principal_forms WHERE form = $1")
                    .bind(recorded.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(Normalised {
                renamed: renames.len(),
                collisions,
            })
        }
    }
}
