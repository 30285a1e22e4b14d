//! Clients gatehouse registered at remote MCP servers' authorization servers (RFC 7591), one per
//! authorization server and redirect URI, shared by replicas and kept across restarts: the
//! record (its secret sealed by the key ring) and the store trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;

/// A client registered at an authorization server.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrationRecord {
    /// The authorization server's issuer, exactly as its metadata names it.
    pub issuer: String,
    /// The redirect URI it was registered with (gatehouse's callback under `public_url`).
    pub redirect_uri: String,
    pub client_id: String,
    /// Sealed with the key ring; None for a public client.
    pub client_secret: Option<Vec<u8>>,
    /// `client_secret_basic`, `client_secret_post` or `none`.
    pub auth_method: String,
    pub registered_at: DateTime<Utc>,
}

#[async_trait]
pub trait RegistrationStore: Send + Sync {
    async fn registration(&self, issuer: &str, redirect_uri: &str) -> Result<Option<RegistrationRecord>, StoreError>;

    /// Stores `record` unless a registration for its issuer and redirect URI is stored already
    /// (another replica registered meanwhile); returns the one stored.
    async fn save_registration(&self, record: &RegistrationRecord) -> Result<RegistrationRecord, StoreError>;

    /// Forgets the registration when it is still `client_id`'s (the server no longer knows that
    /// client); true when one was removed.
    async fn forget_registration(&self, issuer: &str, redirect_uri: &str, client_id: &str) -> Result<bool, StoreError>;
}
