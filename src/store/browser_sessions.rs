//! Browser sessions of the pages in `oauth` identity mode: the record (keyed by a hash of the
//! cookie, never the cookie itself) and the store trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::StoreError;
use crate::domain::Principal;

/// A browser signed in to the pages.
#[derive(Debug, Clone, PartialEq)]
pub struct BrowserSessionRecord {
    /// Hex SHA-256 of the cookie's value.
    pub id: String,
    pub principal: Principal,
    /// The id_token's claims as `Claims::to_json` writes them (a JSON object).
    pub claims: Value,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Browser sessions: made at sign-in, read by every page, ended by sign-out or expiry.
#[async_trait]
pub trait BrowserSessionStore: Send + Sync {
    /// Stores a new session and, in the same transaction, deletes its principal's oldest sessions
    /// beyond `max_per_principal` (never the new one). A principal's creations take turns, on
    /// every replica, so concurrent ones never leave more.
    async fn create_browser_session(
        &self,
        session: &BrowserSessionRecord,
        max_per_principal: usize,
    ) -> Result<(), StoreError>;

    /// The session with this id when it has not expired at `now`.
    async fn browser_session(&self, id: &str, now: DateTime<Utc>) -> Result<Option<BrowserSessionRecord>, StoreError>;

    /// False when there was none.
    async fn delete_browser_session(&self, id: &str) -> Result<bool, StoreError>;

    /// Deletes the sessions expired at `now`; returns how many.
    async fn delete_expired_browser_sessions(&self, now: DateTime<Utc>) -> Result<u64, StoreError>;
}
