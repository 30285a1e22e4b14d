//! [`CatalogueStore`] for both backends. A changed catalogue is announced to every replica by the
//! statement that saves it on PostgreSQL; on SQLite the bus is in process, and whoever saves a
//! changed catalogue announces it there (`Bus::catalogue_changed`).

use sqlx::types::Json;

use super::Sql;
use crate::domain::Principal;
use crate::store::rows::CATALOGUE_COLUMNS;
use crate::store::{CatalogueRecord, CatalogueStore, Notice, StoreError};

static CATALOGUES: Sql = Sql::new(|_| format!("SELECT {CATALOGUE_COLUMNS} FROM upstream_catalogues ORDER BY upstream"));

static CATALOGUE: Sql =
    Sql::new(|_| format!("SELECT {CATALOGUE_COLUMNS} FROM upstream_catalogues WHERE upstream = $1"));

static SAVE_CATALOGUE: Sql = Sql::new(|syntax| {
    syntax.notifying(
        &format!(
            "INSERT INTO upstream_catalogues ({CATALOGUE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (upstream) DO UPDATE SET tools = EXCLUDED.tools, offers = EXCLUDED.offers, digest = EXCLUDED.digest,
                 listed_by = EXCLUDED.listed_by, listed_at = EXCLUDED.listed_at
             RETURNING upstream"
        ),
        &Notice::catalogue_changed_sql("upstream"),
    )
});

shared! {
    impl CatalogueStore {
        async fn catalogues(&self) -> Result<Vec<CatalogueRecord>, StoreError> {
            self.records(sqlx::query_as(CATALOGUES.of::<D>())).await
        }

        async fn catalogue(&self, upstream: &str) -> Result<Option<CatalogueRecord>, StoreError> {
            self.record(sqlx::query_as(CATALOGUE.of::<D>()).bind(upstream)).await
        }

        async fn save_catalogue(&self, c: &CatalogueRecord) -> Result<bool, StoreError> {
            let mut tx = self.pool.begin().await?;
            // Who listed it, and when, change either way. This UPDATE locks the row (a concurrent
            // save waits for this transaction; on SQLite it takes the write lock before anything is
            // read) and returns the digest it holds, which it leaves as it was: the newest
            // committed one, even after waiting for another save.
            let stored: Option<(String,)> = sqlx::query_as(
                "UPDATE upstream_catalogues SET listed_by = $2, listed_at = $3 WHERE upstream = $1 RETURNING digest",
            )
            .bind(c.upstream.as_str())
            .bind(c.listed_by.as_ref().map(Principal::as_str))
            .bind(D::stored(c.listed_at))
            .fetch_optional(&mut *tx)
            .await?;
            let changed = stored.is_none_or(|(digest,)| digest != c.digest);
            if changed {
                // Two first saves racing both get here: the later one updates the row the other inserted.
                sqlx::query(SAVE_CATALOGUE.of::<D>())
                    .bind(c.upstream.as_str())
                    .bind(Json(&c.tools))
                    .bind(Json(&c.offers))
                    .bind(c.digest.as_str())
                    .bind(c.listed_by.as_ref().map(Principal::as_str))
                    .bind(D::stored(c.listed_at))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(changed)
        }
    }
}
