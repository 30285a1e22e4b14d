//! What the operator's `gatehouse admin` lists: every principal's connections, elicitations and
//! sessions, newest or alphabetically first, always bounded. Changes go through the gate and the
//! sessions like any other; only these reads across principals are the operator's own.

use async_trait::async_trait;

use super::{ConnectionRecord, ElicitationRecord, SessionRecord, StoreError};
use crate::domain::{Principal, SessionId, SessionPrefix};

/// Lists across principals, for the operator.
#[async_trait]
pub trait AdminStore: Send + Sync {
    /// Connections, of one principal or all, by principal and provider; at most `limit`.
    async fn list_connections(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> Result<Vec<ConnectionRecord>, StoreError>;

    /// Elicitations, only the pending ones or all, newest first; at most `limit`.
    async fn list_elicitations(&self, pending_only: bool, limit: usize) -> Result<Vec<ElicitationRecord>, StoreError>;

    /// Live sessions, newest first; at most `limit`.
    async fn list_sessions(&self, limit: usize) -> Result<Vec<SessionRecord>, StoreError>;

    /// The ids of the sessions whose id starts with `prefix`; at most `limit`.
    async fn sessions_with_prefix(&self, prefix: &SessionPrefix, limit: usize) -> Result<Vec<SessionId>, StoreError>;
}
