//! SQLite: upstream tool catalogues. The bus is in process: whoever saves a changed catalogue
//! announces it on the bus (`Bus::catalogue_changed`).

use super::*;

#[async_trait]
impl CatalogueStore for SqliteStore {
    async fn catalogues(&self) -> Result<Vec<CatalogueRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {CATALOGUE_COLUMNS} FROM upstream_catalogues ORDER BY upstream"
        ));
        self.records(query).await
    }

    async fn catalogue(&self, upstream: &str) -> Result<Option<CatalogueRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {CATALOGUE_COLUMNS} FROM upstream_catalogues WHERE upstream = ?1"
        ))
        .bind(upstream);
        self.record(query).await
    }

    async fn save_catalogue(&self, c: &CatalogueRecord) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        // A write first, so the transaction holds SQLite's write lock before it reads: who listed
        // it, and when, change either way, and the digest returned is the one stored.
        let stored: Option<(String,)> = sqlx::query_as(
            "UPDATE upstream_catalogues SET listed_by = ?2, listed_at = ?3 WHERE upstream = ?1 RETURNING digest",
        )
        .bind(&c.upstream)
        .bind(c.listed_by.as_ref().map(Principal::as_str))
        .bind(millis(c.listed_at))
        .fetch_optional(&mut *tx)
        .await?;
        let changed = stored.is_none_or(|(digest,)| digest != c.digest);
        if changed {
            sqlx::query(sql!(
                "INSERT INTO upstream_catalogues ({CATALOGUE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (upstream) DO UPDATE SET tools = EXCLUDED.tools, digest = EXCLUDED.digest,
                     listed_by = EXCLUDED.listed_by, listed_at = EXCLUDED.listed_at"
            ))
            .bind(&c.upstream)
            .bind(c.tools.to_string())
            .bind(&c.digest)
            .bind(c.listed_by.as_ref().map(Principal::as_str))
            .bind(millis(c.listed_at))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(changed)
    }
}
