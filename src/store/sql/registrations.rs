//! [`RegistrationStore`] for both backends: the first registration stored for an authorization
//! server wins, so replicas that registered at once all use the same client.

use super::Sql;
use crate::store::rows::REGISTRATION_COLUMNS;
use crate::store::{RegistrationRecord, RegistrationStore, StoreError};

static REGISTRATION: Sql = Sql::new(|_| {
    format!("SELECT {REGISTRATION_COLUMNS} FROM oauth_registrations WHERE issuer = $1 AND redirect_uri = $2")
});

static INSERT_REGISTRATION: Sql = Sql::new(|_| {
    format!(
        "INSERT INTO oauth_registrations ({REGISTRATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (issuer, redirect_uri) DO NOTHING"
    )
});

shared! {
    impl RegistrationStore {
        async fn registration(&self, issuer: &str, redirect_uri: &str) -> Result<Option<RegistrationRecord>, StoreError> {
            self.record(sqlx::query_as(REGISTRATION.of::<D>()).bind(issuer).bind(redirect_uri)).await
        }

        async fn save_registration(&self, r: &RegistrationRecord) -> Result<RegistrationRecord, StoreError> {
            sqlx::query(INSERT_REGISTRATION.of::<D>())
                .bind(r.issuer.as_str())
                .bind(r.redirect_uri.as_str())
                .bind(r.client_id.as_str())
                .bind(r.client_secret.as_deref())
                .bind(r.auth_method.as_str())
                .bind(D::stored(r.registered_at))
                .execute(&self.pool)
                .await?;
            self.registration(&r.issuer, &r.redirect_uri)
                .await?
                .ok_or_else(|| StoreError::Corrupt("a registration vanished as it was stored".into()))
        }

        async fn forget_registration(&self, issuer: &str, redirect_uri: &str, client_id: &str) -> Result<bool, StoreError> {
            let deleted = sqlx::query(
                "DELETE FROM oauth_registrations WHERE issuer = $1 AND redirect_uri = $2 AND client_id = $3",
            )
            .bind(issuer)
            .bind(redirect_uri)
            .bind(client_id)
            .execute(&self.pool)
            .await?;
            Ok(D::rows_affected(&deleted) > 0)
        }
    }
}
