//! Connections: a principal's grant at a provider (tokens sealed by the key ring), saved with its
//! elicitation's completion, refreshed under a lease, broken or deleted. The records and the store
//! trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::StoreError;
use crate::domain::{ElicitationId, Principal};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionStatus {
    Active,
    /// The provider refused the tokens: the user must sign in again.
    Broken,
}

/// A principal's grant at a provider. Tokens are ciphertexts from the key ring.
#[derive(Debug, Clone)]
pub struct ConnectionRecord {
    pub principal: Principal,
    pub provider: String,
    /// The issuer of the authorization server that issued the tokens; None when unknown (made
    /// before issuers were recorded, or at a configured provider without one).
    pub issuer: Option<String>,
    pub access_token: Vec<u8>,
    pub refresh_token: Option<Vec<u8>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub scopes: Vec<String>,
    pub account_label: Option<String>,
    pub status: ConnectionStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// New tokens from a refresh; `refresh_token: None` keeps the stored one.
#[derive(Debug, Clone)]
pub struct RefreshedTokens {
    /// The new access token; `None` keeps the stored one (a lease released unchanged).
    pub access_token: Option<Vec<u8>>,
    pub refresh_token: Option<Vec<u8>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub scopes: Option<Vec<String>>,
}

/// A refresh lease asked for at `now`, to be held until `until`.
#[derive(Debug, Clone, Copy)]
pub struct RefreshLease {
    pub now: DateTime<Utc>,
    pub until: DateTime<Utc>,
}

/// Connections: saved with their elicitation's completion, looked up, broken, refreshed.
#[async_trait]
pub trait ConnectionStore: Send + Sync {
    /// Completes the elicitation, appends `notification` to its session's log and saves the
    /// connection (replacing the principal's previous one at that provider), in one transaction,
    /// when the elicitation was unexpired at `started` (when its callback began) and is pending, or
    /// has been marked expired since (the sweeper ran during the code exchange). False, and
    /// nothing saved, otherwise: a connection is never saved without its elicitation's completion.
    async fn save_connection(
        &self,
        connection: &ConnectionRecord,
        elicitation: &ElicitationId,
        notification: &Value,
        started: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    async fn connection(&self, principal: &Principal, provider: &str) -> Result<Option<ConnectionRecord>, StoreError>;

    async fn connections(&self, principal: &Principal) -> Result<Vec<ConnectionRecord>, StoreError>;

    /// Removes the connection and returns it (to revoke its tokens).
    async fn delete_connection(
        &self,
        principal: &Principal,
        provider: &str,
    ) -> Result<Option<ConnectionRecord>, StoreError>;

    /// Marks the connection broken, unless its tokens changed since `seen_updated_at` (another
    /// call refreshed them meanwhile).
    async fn mark_connection_broken(
        &self,
        principal: &Principal,
        provider: &str,
        seen_updated_at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Takes the refresh lease of an active connection (the principal's at the provider of
    /// `connection`); `None` while another holder's lease runs. One refresh per connection at a
    /// time, across replicas.
    async fn acquire_refresh_lease(
        &self,
        connection: &ConnectionRecord,
        lease: RefreshLease,
    ) -> Result<Option<ConnectionRecord>, StoreError>;

    /// Stores refreshed tokens and releases the lease.
    async fn store_refreshed(
        &self,
        principal: &Principal,
        provider: &str,
        tokens: &RefreshedTokens,
    ) -> Result<(), StoreError>;
}

impl ConnectionStatus {
    /// The status as stored.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ConnectionStatus::Active => "active",
            ConnectionStatus::Broken => "broken",
        }
    }
}
