//! Approvers' votes on approval requests (an elicitation asking for `approval:ID`): one per
//! approver and request, never changed; the record and the store trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;
use crate::domain::{ElicitationId, Principal};

/// One approver's decision on one request.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteRecord {
    pub elicitation_id: ElicitationId,
    pub approver: Principal,
    pub approve: bool,
    /// What the approver wrote, bounded; empty when nothing.
    pub reason: String,
    pub decided_at: DateTime<Utc>,
}

#[async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Stores the vote unless this approver voted on this request already (false then).
    async fn record_vote(&self, vote: &VoteRecord) -> Result<bool, StoreError>;

    /// A request's votes, oldest first.
    async fn votes(&self, elicitation: &ElicitationId) -> Result<Vec<VoteRecord>, StoreError>;
}
