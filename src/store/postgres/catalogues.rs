//! PostgreSQL: upstream tool catalogues, a changed one announced to every replica in the
//! statement that saves it.

use super::*;

#[async_trait]
impl CatalogueStore for PostgresStore {
    async fn catalogues(&self) -> Result<Vec<CatalogueRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {CATALOGUE_COLUMNS} FROM upstream_catalogues ORDER BY upstream"
        ));
        self.records(query).await
    }

    async fn catalogue(&self, upstream: &str) -> Result<Option<CatalogueRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {CATALOGUE_COLUMNS} FROM upstream_catalogues WHERE upstream = $1"
        ))
        .bind(upstream);
        self.record(query).await
    }

    async fn save_catalogue(&self, c: &CatalogueRecord) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Who listed it, and when, change either way. This UPDATE locks the row (a concurrent
        // save waits for this transaction) and returns the digest it holds, which it leaves as
        // it was: the newest committed one, even after waiting for another save.
        let stored: Option<(String,)> = sqlx::query_as(
            "UPDATE upstream_catalogues SET listed_by = $2, listed_at = $3 WHERE upstream = $1 RETURNING digest",
        )
        .bind(&c.upstream)
        .bind(c.listed_by.as_ref().map(Principal::as_str))
        .bind(c.listed_at)
        .fetch_optional(&mut *tx)
        .await?;
        let changed = stored.is_none_or(|(digest,)| digest != c.digest);
        if changed {
            // Two first saves racing both get here: the later one updates the row the other inserted.
            sqlx::query(sql!(
                "WITH saved AS (
                     INSERT INTO upstream_catalogues ({CATALOGUE_COLUMNS}) VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (upstream) DO UPDATE SET tools = EXCLUDED.tools, digest = EXCLUDED.digest,
                         listed_by = EXCLUDED.listed_by, listed_at = EXCLUDED.listed_at
                     RETURNING upstream)
                 SELECT pg_notify($6, $7) FROM saved"
            ))
            .bind(&c.upstream)
            .bind(&c.tools)
            .bind(&c.digest)
            .bind(c.listed_by.as_ref().map(Principal::as_str))
            .bind(c.listed_at)
            .bind(NOTIFY_CHANNEL)
            .bind(Notice::CatalogueChanged(c.upstream.clone()).encode())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(changed)
    }
}
